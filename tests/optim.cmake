muster_gtest(optimizer_test SOURCES optimizer_test.cc DEPS muster_optim LABEL unit)
