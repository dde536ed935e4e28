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

// Taken when the library loads (kTaken); on first use instead when the start-up code of state.cpp runs first.
Started& StartedEnv() {
  static Started* s = new Started(TakeStarted());
  return *s;
}
const bool kTaken = (StartedEnv(), true);

}  // namespace

void SetStartedVariable(const char* name, const char* value) {
  for (std::string& kv : StartedEnv().kept)
    if (NameOf(kv) == name) kv = std::string(name) + "=" + value;
}

size_t ChildEnvSlots(char* const envp[]) {
  size_t n = 0;
  while (envp && envp[n]) ++n;
  return n + StartedEnv().kept.size() + 3;  // + LD_PRELOAD, FANSTORE_CWD and the null
}

char* const* ChildEnv(char* const envp[], const char* cwd_kv, char** slots, std::string* merged) {
  // One pass into `slots` (the caller's stack, so nothing is allocated but a merged LD_PRELOAD); `envp` itself when
  // nothing was added or replaced.
  const Started& started = StartedEnv();
  const std::string& lib = started.preload;
  size_t n = 0;
  bool changed = false;
  for (size_t i = 0; envp && envp[i]; ++i) {
    const std::string_view kv(envp[i]), name = NameOf(kv);
    if (cwd_kv != nullptr && name == env::kCwd) continue;  // set below
    if (name == "LD_PRELOAD" && !lib.empty() && kv.find(lib) == std::string_view::npos) {
      *merged = started.preload_kv + ":" + std::string(kv.substr(name.size() + 1));
      slots[n++] = merged->data();
      changed = true;
      continue;
    }
    slots[n++] = envp[i];
  }
  auto add = [&](const char* kv) {
    slots[n++] = const_cast<char*>(kv);
    changed = true;
  };
  if (!lib.empty() && !Has(envp, "LD_PRELOAD")) add(started.preload_kv.c_str());
  for (const std::string& kv : started.kept)
    if (!Has(envp, NameOf(kv))) add(kv.c_str());
  if (cwd_kv != nullptr) {
    add(cwd_kv);
  } else if (const char* now = getenv(env::kCwd); now != nullptr && !Has(envp, env::kCwd)) {
    add(now - strlen(env::kCwd) - 1);  // its "NAME=value" in environ
  }
  slots[n] = nullptr;
  return changed ? slots : envp;
}

}  // namespace fanstore::interpose
