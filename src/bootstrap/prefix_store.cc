// PrefixStore: a namespaced view of another store, so that sub-communicators can share one
// connection without their keys colliding.

#include <utility>

#include "tpf/error.h"
#include "tpf/store.h"

namespace tpf {

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> inner)
    : prefix_(std::move(prefix)), inner_(std::move(inner)) {
  if (!inner_) {
    throw Error(ErrorCode::invalid_argument,
                "PrefixStore: inner store is null (prefix '" + prefix_ + "')");
  }
  prefix_ += '/';
}

void PrefixStore::set(const std::string& key, const std::string& value) {
  inner_->set(prefix_ + key, value);
}

std::string PrefixStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  return inner_->get(prefix_ + key, timeout);
}

int64_t PrefixStore::add(const std::string& key, int64_t delta) {
  return inner_->add(prefix_ + key, delta);
}

bool PrefixStore::check(const std::string& key) { return inner_->check(prefix_ + key); }

}  // namespace tpf
