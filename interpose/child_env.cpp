// ChildEnv: what an explicit child environment needs to see the image (child_env.hpp).
#include "child_env.hpp"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <string_view>
#include <vector>

#include "fanstore/env.hpp"

namespace fanstore::interpose {
namespace {

std::string_view NameOf(std::string_view kv) { return kv.substr(0, kv.find('=')); }

bool Has(char* const envp[], std::string_view name) {
  for (size_t i = 0; envp && envp[i]; ++i)
    if (NameOf(envp[i]) == name) return true;
  return false;
}

// What this process was started with, taken when the library loads: `env -i` clears environ before its exec.
struct Started {
  std::string preload;            // the preload library's own entry of LD_PRELOAD
  std::string preload_kv;         // "LD_PRELOAD=" + preload
  std::vector<std::string> kept;  // "NAME=value": every FANSTORE_* but FANSTORE_CWD (it follows chdir), LD_AUDIT
};

Started TakeStarted() {
  Started s;
  for (size_t i = 0; environ && environ[i]; ++i) {
    const std::string_view kv(environ[i]), name = NameOf(kv);
    if ((name.substr(0, 9) == "FANSTORE_" && name != env::kCwd) || name == "LD_AUDIT") s.kept.emplace_back(kv);
    if (name != "LD_PRELOAD") continue;
    for (std::string_view rest = kv.substr(name.size() + 1); !rest.empty();) {  // space- or colon-separated
      const size_t end = rest.find_first_of(": ");
      if (const std::string_view entry = rest.substr(0, end); entry.find("libfanstore_preload") != entry.npos)
        s.preload = entry;
      rest.remove_prefix(end == std::string_view::npos ? rest.size() : end + 1);
    }
  }
  if (!s.preload.empty()) s.preload_kv = "LD_PRELOAD=" + s.preload;
  return s;
}

const Started kStarted = TakeStarted();

}  // namespace

size_t ChildEnvSlots(char* const envp[]) {
  size_t n = 0;
  while (envp && envp[n]) ++n;
  return n + kStarted.kept.size() + 3;  // + LD_PRELOAD, FANSTORE_CWD and the null
}

char* const* ChildEnv(char* const envp[], const char* cwd_kv, char** slots, std::string* merged) {
  const std::string& lib = kStarted.preload;
  const char* now = getenv(env::kCwd);
  bool lacks =
      cwd_kv != nullptr || (now != nullptr && !Has(envp, env::kCwd)) || (!lib.empty() && !Has(envp, "LD_PRELOAD"));
  for (size_t i = 0; envp && envp[i] && !lacks; ++i)
    lacks = NameOf(envp[i]) == "LD_PRELOAD" && !lib.empty() &&
            std::string_view(envp[i]).find(lib) == std::string_view::npos;
  for (size_t k = 0; k < kStarted.kept.size() && !lacks; ++k) lacks = !Has(envp, NameOf(kStarted.kept[k]));
  if (!lacks) return envp;
  size_t n = 0;
  for (size_t i = 0; envp && envp[i]; ++i) {
    const std::string_view kv(envp[i]), name = NameOf(kv);
    if (cwd_kv != nullptr && name == env::kCwd) continue;  // set below
    if (name == "LD_PRELOAD" && !lib.empty() && kv.find(lib) == std::string_view::npos) {
      *merged = kStarted.preload_kv + ":" + std::string(kv.substr(name.size() + 1));
      slots[n++] = merged->data();
      continue;
    }
    slots[n++] = envp[i];
  }
  if (!lib.empty() && !Has(envp, "LD_PRELOAD")) slots[n++] = const_cast<char*>(kStarted.preload_kv.c_str());
  for (const std::string& kv : kStarted.kept)
    if (!Has(envp, NameOf(kv))) slots[n++] = const_cast<char*>(kv.c_str());
  if (cwd_kv != nullptr) slots[n++] = const_cast<char*>(cwd_kv);
  else if (now != nullptr && !Has(envp, env::kCwd))
    slots[n++] = const_cast<char*>(now - strlen(env::kCwd) - 1);  // its "NAME=value" in environ
  slots[n] = nullptr;
  return slots;
}

}  // namespace fanstore::interpose
