#!/usr/bin/env bash
# The sanitizer job: configures BUILD_DIR (default build-asan) with clang, AddressSanitizer
# + UndefinedBehaviorSanitizer (stopping at the first report, leaks checked) and the
# fuzz targets, builds everything and runs the test suite there. The Vulkan backend is
# left out (lavapipe under ASan would double the job's time).
# Usage: tools/sanitize.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build-asan}"
command -v clang++ >/dev/null || { echo "tools/sanitize.sh: clang++ not found (run tools/setup.sh)" >&2; exit 1; }
# A unity build, like the plain one (file by file it took twice as long: 27 against 15
# minutes on 2 cores); tools/compile_each_file.sh checks that each file compiles alone.
CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" -DFAFO_FUZZ=ON -DFAFO_VULKAN=OFF -DFAFO_CUDA=OFF \
  -DCMAKE_UNITY_BUILD=ON
cmake --build "$build"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
# Left out: the tests that check output equality over many prompts, strategies, policies
# and parameters (the plain build runs them; under the sanitizers each takes from 20
# seconds to minutes, and they repeat the code paths the other tests reach), and
# CliChat.CtrlC..., which waits a minute for an unbounded reply to fill a 4096-token
# context. FAFO_SANITIZE_ALL=1 runs everything. (The times in these comments were
# measured when the job ran Highway's portable EMU128 kernels; its own instruction set's
# run several times faster.)
exclude='^(CorpusDecoding|CudaEmulated|Decoding|DraftDecoding|AutoStrategy|CliChatStrategies)\.|PolicyGeneration\.'
exclude+='|^Generator\.TopKSampling|^BackendOpsTable\.CpuResultsDoNotDependOnTheThreadCount|^CpuAttention\.LongContext'
exclude+='|^ChatSessionOnStories\.LongSampled|^Cli\.(BenchCompares|Strategies)|^CliChat\.CtrlCStopsTheReply'
exclude+='|^StudioBench\.(CancelKeeps|DestroyingARunning)'
# The same kind of checks on the MLA model, the lossy KV modes and perplexity, and the
# checks that the op table fails on a wrong row or a wrong region slot (tests of the
# tests): together about eleven minutes of the job's single-core time under the sanitizers.
exclude+='|^Mla\.(EveryStrategyEqualsArOnAnMlaModel|DraftModelsAndSpeckvKeepAnMlaModelsOutput)$'
exclude+='|^LossyModes\.SpeckvAsFafosRegionIsLossless$|^Perplexity\.LossyModesChangeItOnlyWhenTheyDropSomething$'
exclude+='|^BackendPairs\.ThePairCheckSeesAWrongRow$|^BackendOpsTable\.AWrongRegionSlotInCpuAttentionFailsConformance$'
# Threads generating side by side for a minute under ASan each: the joined and shared
# steps' exactness is checked there by JoinedSteps.EachPartGetsTheBitsOfItsStepAlone.
exclude+='|^JoinedSteps\.AJoinerJoinsConcurrentGenerationsWithoutChangingATokens$'
exclude+='|^SharedWeights\.SequencesOnOneLoadGiveTheIdsOfSeparateModelsFromAnyThread$'
# The families against llama.cpp: numerics with real vocabularies (151,669 logits per
# position); their loading and forward code runs under the sanitizers in SyntheticModel.*.
exclude+='|^ModelFamilies\.'
# Every strategy and policy against AR on a split model (and an MLA model split), a
# quantized cache, window rings and a mixture-of-experts model: the plain build runs
# them; the splits, caches, rings, latents and expert blocks themselves run under the
# sanitizers in those files' other tests (LayerSplit.TwoCpuDevices...,
# LayerSplit.EveryFamily..., QuantizedKv.TheCpuBackend..., WindowRings.EveryStep...,
# Mla.JoinedSteps..., Moe.ARowsLogits...). About thirteen minutes of the job's
# single-core time.
exclude+='|^Mla\.ALayerSplitGivesOneDevicesBitsAndEveryStrategyAr$|^QuantizedKv\.EveryStrategyAndPolicyGivesPlainDecodingsTokens$'
exclude+='|^LayerSplit\.EveryStrategyAndPolicyEqualsArOnASplit$|^WindowRings\.EveryStrategyGivesPlainDecodingsTokens$'
exclude+='|^Moe\.EveryStrategyGivesPlainDecodingsIds$'
# The emulated CUDA attention rows of the op table (five and a half minutes under the
# sanitizers) and the whole emulated table again as graphs (BackendOps.CudaEmulatedWith-
# StepGraphs: seven and a half minutes, a third of the job's test time): the plain build
# runs both; here the emulated attention's blocks run in CudaAttention.*, the graphs in
# CudaGraphs.*, and every other op's emulated rows launch by launch.
exclude+='|^EveryBackendAndDevice/BackendOps\.Attention/cuda_emulated_|^BackendOps\.CudaEmulatedWithStepGraphs$'
# The reference's attention rows against a second reference (four minutes under the
# sanitizers): the reference's attention runs there as the oracle of the cpu rows.
exclude+='|^EveryBackendAndDevice/BackendOps\.Attention/reference_'
# ThreadPool.ThreadCreationFailureIsAnError caps the address space just above what the
# process maps, so that a thread cannot be made; ASan maps each new thread's fake stack
# (detect_stack_use_after_return) first and aborts instead.
exclude+='|^ThreadPool\.ThreadCreationFailureIsAnError$'
# The studio's screenshots render through Mesa's OpenGL under Xvfb, whose driver leaks a
# few blocks at exit from a library LeakSanitizer cannot name (so no suppression matches).
exclude+='|^StudioScreenshot\.'
if [ "${FAFO_SANITIZE_ALL:-0}" = 1 ]; then exclude='^$'; fi
ctest --test-dir "$build" --output-on-failure -j2 --timeout 600 -E "$exclude"
