// "{node}" expansion: substitution, refused node names, and where the name comes from (Slurm, else the host).
#include "fanstore/path_template.hpp"

#include <gtest/gtest.h>
#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include <optional>
#include <string>

namespace fanstore {
namespace {

// Sets or unsets SLURMD_NODENAME for one test and puts the old value back.
class ScopedNodeEnv {
 public:
  explicit ScopedNodeEnv(const char* value) {
    if (const char* old = getenv("SLURMD_NODENAME")) old_ = old;
    if (value) setenv("SLURMD_NODENAME", value, 1);
    else unsetenv("SLURMD_NODENAME");
  }
  ~ScopedNodeEnv() {
    if (old_) setenv("SLURMD_NODENAME", old_->c_str(), 1);
    else unsetenv("SLURMD_NODENAME");
  }

 private:
  std::optional<std::string> old_;
};

std::string HostName() {
  char host[HOST_NAME_MAX + 1] = {};
  EXPECT_EQ(gethostname(host, sizeof host - 1), 0);
  return host;
}

TEST(ExpandNodeTest, ReplacesEveryOccurrence) {
  EXPECT_EQ(*ExpandNode("/tmp/fs-{node}", "n3"), "/tmp/fs-n3");
  EXPECT_EQ(*ExpandNode("/tmp/{node}/{node}.sock", "c401-001"), "/tmp/c401-001/c401-001.sock");
  EXPECT_EQ(*ExpandNode("{node}{node}", "a"), "aa");
  EXPECT_EQ(*ExpandNode("/scratch/{node}", "node.cluster.example"), "/scratch/node.cluster.example");
  EXPECT_EQ(*ExpandNode("", "n1"), "");
}

TEST(ExpandNodeTest, LeavesOtherTextAlone) {
  EXPECT_EQ(*ExpandNode("/tmp/plain", "n1"), "/tmp/plain");
  EXPECT_EQ(*ExpandNode("/tmp/{rank}", "n1"), "/tmp/{rank}");  // the daemon expands {rank} itself
  EXPECT_EQ(*ExpandNode("/tmp/{NODE}/{nod}/{node", "n1"), "/tmp/{NODE}/{nod}/{node");
  EXPECT_EQ(*ExpandNode("{{node}}", "n1"), "{n1}");
}

TEST(ExpandNodeTest, RefusesNamesThatAreNotOneComponent) {
  for (std::string bad : {std::string(""), std::string("."), std::string(".."), std::string("a/b"),
                          std::string("../etc"), std::string("/"), std::string("n1\0x", 4)}) {
    auto r = ExpandNode("/tmp/{node}", bad);
    ASSERT_FALSE(r.ok()) << "'" << bad << "'";
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
    EXPECT_NE(r.status().message().find("{node}"), std::string::npos) << r.status().message();
  }
  // Even a path without {node} refuses a bad name: the caller asked to expand with it.
  EXPECT_FALSE(ExpandNode("/tmp/x", "..").ok());
}

TEST(NodeNameTest, SlurmNameWins) {
  ScopedNodeEnv env("n2");
  EXPECT_EQ(*NodeName(), "n2");
  EXPECT_EQ(*ExpandNodeTemplate("/tmp/fs-{node}/fanstore.sock"), "/tmp/fs-n2/fanstore.sock");
}

TEST(NodeNameTest, HostNameWithoutSlurm) {
  {
    ScopedNodeEnv env(nullptr);
    EXPECT_EQ(*NodeName(), HostName());
    EXPECT_EQ(*ExpandNodeTemplate("/tmp/{node}"), "/tmp/" + HostName());
  }
  ScopedNodeEnv empty("");  // exported but empty: as if unset
  EXPECT_EQ(*NodeName(), HostName());
}

TEST(NodeNameTest, HostileSlurmNameIsOneClearError) {
  ScopedNodeEnv env("../../etc");
  auto r = ExpandNodeTemplate("/tmp/{node}");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("SLURMD_NODENAME"), std::string::npos) << r.status().message();
  // A path without the key never looks the name up, so it cannot fail on it.
  EXPECT_EQ(*ExpandNodeTemplate("/tmp/plain"), "/tmp/plain");
}

}  // namespace
}  // namespace fanstore
