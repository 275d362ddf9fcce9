// muster-mpi-hello: a tiny MPI program for the mpi-mode cluster tests.
// Every rank contributes rank+1 to an MPI_Allreduce and checks the sum
// against n(n+1)/2; it prints one line per rank and exits non-zero on a
// wrong sum, so a test can tell a real collective ran across all slots.
#include <mpi.h>

#include <cstdio>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  int size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  long mine = rank + 1;
  long sum = 0;
  MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  const long expected = static_cast<long>(size) * (size + 1) / 2;
  std::printf("mpi_hello rank %d of %d allreduce sum %ld expected %ld\n", rank, size, sum, expected);
  std::fflush(stdout);
  MPI_Finalize();
  return sum == expected ? 0 : 1;
}
