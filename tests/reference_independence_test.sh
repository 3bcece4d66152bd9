#!/usr/bin/env bash
# The reference backend shares no code with the other backends (issue: an oracle that
# shares no code with what it checks). Two checks on its own library, fafo_reference:
#   - no source under runtime/src/backend/reference includes a header of backend/host,
#     backend/cpu, backend/vulkan, the CUDA backend or the thread pool;
#   - the library's undefined symbols name nothing of those (fafo::host, fafo::scalar,
#     fafo::cpu, fafo::vulkan, fafo::cuda, ThreadPool).
# The symbol check first proves that it sees the library's outside references at all
# (the block decoders' dequantize_row must be among them).
set -euo pipefail
src_dir=$1
library=$2
status=0
if includes=$(grep -rnE '#include "(backend/(host|cpu|vulkan)/|util/thread_pool|cuda_backend|cuda/)' "$src_dir"); then
  echo "the reference backend includes other backends' code:"
  echo "$includes"
  status=1
fi
undefined=$(nm -C --undefined-only "$library")
if ! grep -q 'fafo::dequantize_row' <<<"$undefined"; then
  echo "nm lists no use of fafo::dequantize_row in $library: the symbol check sees nothing"
  exit 1
fi
if shared=$(grep -E 'fafo::(host|scalar|cpu|vulkan|cuda)::|ThreadPool' <<<"$undefined"); then
  echo "the reference backend's library uses other backends' code:"
  echo "$shared" | sort -u
  status=1
fi
[ $status -eq 0 ] && echo "the reference backend ($library) shares no code with the other backends"
exit $status
