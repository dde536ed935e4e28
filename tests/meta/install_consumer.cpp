// A C++ program outside the FanStore tree, built by tests/meta/install_test.sh against an installed prefix through
// find_package(FanStore): it reads files of an image with the client library and writes their bytes to stdout.
// Usage: consumer IMAGE PATH...
#include <cstdio>
#include <memory>

#include "fanstore/client.hpp"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: consumer IMAGE PATH...\n");
    return 2;
  }
  fanstore::ClientOptions options;
  options.image = argv[1];
  auto client = fanstore::Client::Create(options);
  if (!client.ok()) {
    std::fprintf(stderr, "consumer: %s\n", client.status().ToString().c_str());
    return 1;
  }
  for (int i = 2; i < argc; ++i) {
    auto id = (*client)->Lookup(argv[i]);
    if (!id.ok()) {
      std::fprintf(stderr, "consumer: %s: %s\n", argv[i], id.status().ToString().c_str());
      return 1;
    }
    auto bytes = (*client)->Load(*id);
    if (!bytes.ok()) {
      std::fprintf(stderr, "consumer: %s: %s\n", argv[i], bytes.status().ToString().c_str());
      return 1;
    }
    std::fwrite((*bytes)->data(), 1, (*bytes)->size(), stdout);
  }
  return 0;
}
