// Registry of dlopen'ed generated-kernel libraries of one kind (TPSpec, SCSpec, TPFusedSpec):
// load (with a one-time preload of the libraries listed in an environment variable, for C++
// users such as the LAMMPS plugin), newest-first search, a generation counter that callers cache
// against, and an on/off switch. Handles stay open for the life of the process.
#pragma once

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include <c10/util/Exception.h>

namespace md_accel {

template <typename Spec>
class SpecRegistry {
 public:
  // what: op name for messages; symbol: the library's entry point; env: preload variable
  SpecRegistry(const char* what, const char* symbol, int abi_version, const char* env)
      : what_(what), symbol_(symbol), abi_(abi_version), env_(env) {}

  int64_t load(const std::string& path) {
    std::lock_guard<std::mutex> lock(mutex_);
    preload_locked();
    return load_locked(path);
  }

  // The most recently loaded spec for which match(spec) holds, or nullptr.
  template <typename Match>
  const Spec* find(Match match) {
    std::lock_guard<std::mutex> lock(mutex_);
    preload_locked();
    for (auto it = specs_.rbegin(); it != specs_.rend(); ++it)
      if (match(*it)) return *it;
    return nullptr;
  }

  // Changes whenever a library is loaded (after the preload, so read it through find() first).
  int generation() const { return generation_.load(); }
  bool enabled() const { return enabled_.load(); }
  bool set_enabled(bool enabled) { return enabled_.exchange(enabled); }

 private:
  int64_t load_locked(const std::string& path) {
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    TORCH_CHECK(h != nullptr, "md_accel ", what_, ": cannot load ", path, ": ", dlerror());
    auto entry = reinterpret_cast<const Spec* (*)()>(dlsym(h, symbol_));
    TORCH_CHECK(entry != nullptr, "md_accel ", what_, ": ", path, " has no ", symbol_);
    const Spec* spec = entry();
    TORCH_CHECK(spec != nullptr && spec->abi_version == abi_, "md_accel ", what_, ": ", path,
                " was built for another ABI version");
    specs_.push_back(spec);
    generation_.fetch_add(1);
    return int64_t(specs_.size()) - 1;
  }

  void preload_locked() {
    if (preloaded_) return;
    preloaded_ = true;
    const char* env = std::getenv(env_);
    if (env == nullptr) return;
    const std::string all(env);
    size_t start = 0;
    while (start <= all.size()) {
      const size_t end = std::min(all.find(':', start), all.size());
      if (end > start) load_locked(all.substr(start, end - start));
      start = end + 1;
    }
  }

  const char* what_;
  const char* symbol_;
  int abi_;
  const char* env_;
  std::mutex mutex_;
  std::vector<const Spec*> specs_;
  std::atomic<int> generation_{0};
  std::atomic<bool> enabled_{true};
  bool preloaded_ = false;
};

}  // namespace md_accel
