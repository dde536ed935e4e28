// The `fanstore run` this command runs under, if any. The interposer leaves the fanstore binary alone (it reads images
// itself), so the run's mount is not there for it: `run` must not hide the outer image, and `pack` must not pack
// the empty directory the prefix really is.
#pragma once

#include <string>

namespace fanstore::cli {

// What an enclosing `fanstore run` serves this process tree through LD_PRELOAD (taken before a run changes the
// environment): "--image DIR" or "--daemon SOCKET", and its prefix; empty when there is none.
struct OuterRun {
  std::string image, daemon, mount;
  bool present() const { return !image.empty() || !daemon.empty(); }
  std::string Words() const {
    return "fanstore run " + (daemon.empty() ? "--image " + image : "--daemon " + daemon) + " --mount " + mount;
  }
};

OuterRun FindOuterRun();

// Whether `path`, as the program that started this command means it (a relative one from the run's virtual working
// directory when there is one), lies at or under the outer run's mount.
bool UnderOuterMount(const OuterRun& outer, const std::string& path);

}  // namespace fanstore::cli
