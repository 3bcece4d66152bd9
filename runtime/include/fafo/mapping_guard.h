// Memory-mapped files that shrink while mapped. Reading a page of a map past the end of
// a file that was truncated under it raises SIGBUS, which would kill the process. A
// registered map is guarded instead: a process-wide SIGBUS handler (installed with the
// first registration, passing other faults on to the handler before it) replaces the
// map's pages from the faulting one to its end with zero pages and marks the map
// damaged, so the read sees zeros and the program goes on. The owner then checks
// mapping_damaged() (GgufFile::check_intact(), before and after every step) and turns
// it into an error naming the file: the results of the step that read zeros are never
// used.
#pragma once

#include <cstddef>

namespace fafo {

// Guards [base, base + size) (base page-aligned, as mmap returns it); returns a handle for
// the calls below, or -1 when every slot is taken (the map is then not guarded).
int guard_mapping(const void* base, size_t size);
// Stops guarding (before munmap).
void unguard_mapping(int handle);
// Whether a read of the map found the file shorter than the map.
bool mapping_damaged(int handle);

}  // namespace fafo
