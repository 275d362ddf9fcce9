# runtime/nn: layer adjoints, gradient checks of both models, training sanity.
muster_gtest(layers_test SOURCES layers_test.cc DEPS muster_nn LABEL unit ENV "OMP_NUM_THREADS=1")
muster_gtest(model_test SOURCES model_test.cc DEPS muster_nn LABEL unit ENV "OMP_NUM_THREADS=1")
