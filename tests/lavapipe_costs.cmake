# Included by ctest after the discovered gtest cases (tests/CMakeLists.txt), in builds
# with Vulkan: the costliest lavapipe cases, in seconds on a 2-core machine with a cold
# Mesa shader cache, nearly all of it compiling pipelines. A fresh build has no timings of
# its own, so without these ctest -j started them wherever they fell and the longest ran
# alone at the end of the suite.
set_tests_properties(VulkanWeightKernels.MatmulMatchesTheCpuForEveryFormatShapeAndTokenCount PROPERTIES COST 500)
set_tests_properties(VulkanWeightKernels.EveryVariantAndTokenCountGivesEachTokenTheMatVecBits PROPERTIES COST 260)
set_tests_properties(VulkanBackend.MatrixTilesGiveTheLogitsOfTheOtherKernels PROPERTIES COST 210)
set_tests_properties(LayerSplit.LavapipeAndCpuAtEveryBoundary PROPERTIES COST 155)
set_tests_properties(VulkanBackend.IntegerProductsKeepEveryStrategyEqualToAr PROPERTIES COST 120)
set_tests_properties(VulkanWeightKernels.FusedGateAndNormGiveTheBitsOfTheSeparateKernels PROPERTIES COST 110)
set_tests_properties(VulkanSubgroupMatmul.SubgroupVariantGivesThePortableBitsForEveryFormatShapeAndTokenCount
                     PROPERTIES COST 110)
set_tests_properties(Mla.EveryStrategyEqualsArOnVulkan PROPERTIES COST 90)
set_tests_properties(VulkanBackend.FusedProjectionsGiveTheBitsOfSeparateKernels PROPERTIES COST 85)
set_tests_properties(VulkanBackend.EveryStrategyEqualsArOnVulkan PROPERTIES COST 75)
# The three cases that multiply every format with every variant compile mostly the same
# pipelines, in the same order of formats: side by side, each compiled them again (both
# missing the cache); one after the other, the later ones find the earlier one's.
set_tests_properties(VulkanWeightKernels.MatmulMatchesTheCpuForEveryFormatShapeAndTokenCount
                     VulkanWeightKernels.EveryVariantAndTokenCountGivesEachTokenTheMatVecBits
                     VulkanSubgroupMatmul.SubgroupVariantGivesThePortableBitsForEveryFormatShapeAndTokenCount
                     PROPERTIES RESOURCE_LOCK lavapipe-every-format-pipelines)
