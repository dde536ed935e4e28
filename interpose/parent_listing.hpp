// The mount point's entry in its parent's listing: `ls /data` shows `imagenet` for --mount /data/imagenet,
// as it would for a real mount, even when no such directory exists on disk.
#pragma once

#include <dirent.h>

namespace fanstore::interpose::parent_listing {

// After libc opened the directory stream `d` for the program: when its fd is marked as the mount's parent
// (fd table) and the mount's name is missing from that directory on disk, readdir on `d` will add it.
void Note(DIR* d);
// Before closedir(d).
void Forget(DIR* d);
// True while some noted stream is open (one atomic load).
bool Any();

// readdir64 on `d`: libc's entries, then the mount's entry once; errno as readdir leaves it. *noted is
// false (and nothing is read) when `d` is not a noted stream.
struct dirent64* Next(DIR* d, bool* noted);
// rewinddir/seekdir on a noted stream (after libc's): the mount's entry comes again at the end of the
// stream, unless `loc` is libc's end position as telldir reported it right after the entry was returned.
void Rewound(DIR* d);
void Sought(DIR* d, long loc);

void LockForFork();
void UnlockForFork();

}  // namespace fanstore::interpose::parent_listing
