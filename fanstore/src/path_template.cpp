// "{node}" expansion as Status results; the rules themselves are
// fanstore/protocol/include/fanstore/protocol/node_name.hpp.
#include "fanstore/path_template.hpp"

#include "fanstore/protocol/node_name.hpp"

namespace fanstore {

static_assert(kNodeKey == node_name::kKey, "the public header and the protocol name the same key");

Result<std::string> NodeName() {
  auto found = node_name::LookUp();
  if (!found.error.empty()) return Status(Code::kInvalidArgument, found.error);
  return std::move(found.name);
}

Result<std::string> ExpandNode(std::string_view path, std::string_view node) {
  if (auto why = node_name::WhyNotAComponent(node); !why.empty())
    return Status(Code::kInvalidArgument, "node name '" + std::string(node) + "' cannot replace {node} in '" +
                                              std::string(path) + "': " + std::string(why));
  return node_name::Substitute(path, node);
}

Result<std::string> ExpandNodeTemplate(std::string_view path) {
  if (path.find(kNodeKey) == std::string_view::npos) return std::string(path);
  auto node = NodeName();
  if (!node.ok()) return node.status();
  return ExpandNode(path, *node);
}

}  // namespace fanstore
