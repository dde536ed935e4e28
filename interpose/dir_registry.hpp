// Our own directory streams (not glibc DIRs) and the registry that tells them apart from libc's.
#pragma once

#include <dirent.h>

#include <cstdint>

namespace fanstore::interpose {

// What opendir/fdopendir return for a directory in the image, cast to DIR*. Entries come from the
// image's precomputed listing: position 0 is ".", 1 is "..", 2 + i is child i.
struct OurDir {
  int fd = -1;          // a real kernel fd tracked as this directory (dirfd() returns it)
  uint32_t id = 0;      // the directory's entry id
  long pos = 0;         // next position (telldir/seekdir cookie)
  struct dirent64 ent;  // readdir's result buffer (dirent and dirent64 share this layout on x86-64)
};

namespace dirs {

OurDir* Create(int fd, uint32_t id);  // registers it; nullptr on allocation failure (errno ENOMEM)
// The OurDir behind `d`, or nullptr for a glibc DIR. Costs one atomic load while no OurDir is live.
OurDir* Find(void* d);
void Destroy(OurDir* d);  // unregisters and frees (does not close the fd)

// Fills `out` with the entry at d->pos and advances; false at the end of the stream.
bool Next(OurDir* d, struct dirent64* out);

void LockForFork();
void UnlockForFork();

}  // namespace dirs
}  // namespace fanstore::interpose
