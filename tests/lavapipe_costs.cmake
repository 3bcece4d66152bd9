# Included by ctest after the discovered gtest cases (tests/CMakeLists.txt), in builds
# with Vulkan: the costliest lavapipe cases, in seconds on a 2-core machine with a cold
# Mesa shader cache, nearly all of it compiling pipelines. A fresh build has no timings of
# its own, so without these ctest -j started them wherever they fell and the longest ran
# alone at the end of the suite.
set_tests_properties(VulkanEveryVariant.EveryVariantAndTokenCountGivesEachTokenTheMatVecBitsInFormats1To5
                     VulkanEveryVariant.EveryVariantAndTokenCountGivesEachTokenTheMatVecBitsInFormats6To10
                     VulkanEveryVariant.EveryVariantAndTokenCountGivesEachTokenTheMatVecBitsInFormats11To15
                     VulkanEveryVariant.EveryVariantAndTokenCountGivesEachTokenTheMatVecBitsInFormats16To20
                     PROPERTIES COST 150)
set_tests_properties(VulkanBackend.MatrixTilesGiveTheLogitsOfTheOtherKernels PROPERTIES COST 170)
set_tests_properties(VulkanMatmulShapes.MatmulMatchesTheCpuForEveryShapeAndTokenCountInFormats1To5
                     VulkanMatmulShapes.MatmulMatchesTheCpuForEveryShapeAndTokenCountInFormats6To10
                     VulkanMatmulShapes.MatmulMatchesTheCpuForEveryShapeAndTokenCountInFormats11To15
                     VulkanMatmulShapes.MatmulMatchesTheCpuForEveryShapeAndTokenCountInFormats16To20
                     PROPERTIES COST 150)
set_tests_properties(VulkanOrder.IntegerProductsGiveTheCudaBits PROPERTIES COST 125)
set_tests_properties(VulkanOrder.IntegerProductsOfFourBitCodesGiveTheCudaBits PROPERTIES COST 45)
set_tests_properties(VulkanOrder.IntegerProductsOfQ3KAndTheLegacyFormatsGiveTheCudaBits PROPERTIES COST 45)
set_tests_properties(VulkanWeightKernels.FusedGateAndNormGiveTheBitsOfTheSeparateKernels PROPERTIES COST 125)
set_tests_properties(VulkanSubgroupMatmul.SubgroupVariantGivesThePortableBitsForEveryFormatShapeAndTokenCount
                     PROPERTIES COST 120)
set_tests_properties(LayerSplit.LavapipeAndCpuAtEveryBoundary PROPERTIES COST 115)
set_tests_properties(Mla.EveryStrategyEqualsArOnVulkan PROPERTIES COST 100)
set_tests_properties(VulkanBackend.IntegerProductsKeepEveryStrategyEqualToAr PROPERTIES COST 90)
set_tests_properties(VulkanBackend.FusedProjectionsGiveTheBitsOfSeparateKernels PROPERTIES COST 75)
set_tests_properties(VulkanBackend.EveryStrategyEqualsArOnVulkan PROPERTIES COST 70)
# The op table's attention rows on lavapipe: about 80 s of attention over long contexts
# and as much again compiling its pipelines.
set_tests_properties(EveryBackendAndDevice/BackendOps.Attention/vulkan_0 PROPERTIES COST 150)
