# runtime/data: IDX reader (incl. corrupt files), data set loading, distributed sampler.
muster_gtest(idx_reader_test SOURCES idx_reader_test.cc DEPS muster_data LABEL unit)
muster_gtest(distributed_sampler_test SOURCES distributed_sampler_test.cc DEPS muster_data LABEL unit)
