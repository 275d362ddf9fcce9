// musterd: the daemon. Its program is service/musterd_main.h's.
#include "service/musterd_main.h"

int main(int argc, char** argv) { return muster::service::musterd_main(argc, argv); }
