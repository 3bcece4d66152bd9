# Included by ctest after the discovered gtest cases (tests/CMakeLists.txt), in the
# sanitizer job's build (tools/sanitize.sh): its costliest cases, in seconds under ASan +
# UBSan on a 2-core machine, so that ctest -j starts them first. Without this one, started
# last (a fresh build has no timings of its own), it ran alone at the end of the job.
set_tests_properties(EveryBackendAndDevice/BackendOps.Attention/cpu_0 PROPERTIES COST 140)
# The next costliest there (68 s and 31 s, measured 2026-12-01), started after the cases
# of test_cuda_host (COST 100 each, tests/CMakeLists.txt), most of which take a second.
set_tests_properties(Faults.OutOfMemoryOnEitherDeviceOfASplitKeepsTheConversationAndItGoesOn PROPERTIES COST 70)
set_tests_properties(CliQuantize.Iq3MatricesAreTheQuantizersRows PROPERTIES COST 35)
