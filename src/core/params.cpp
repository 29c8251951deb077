#include "bertcc/params.h"

#include "bertcc/error.h"

namespace bertcc {

size_t ParamTable::add(const std::string& name, std::vector<int64_t> shape, bool weight_decay) {
  BERTCC_CHECK(!index_.count(name), "parameter table: duplicate tensor '", name, "'");
  ParamEntry e;
  e.name = name;
  e.numel = 1;
  for (int64_t d : shape) e.numel *= static_cast<size_t>(d);
  e.shape = std::move(shape);
  e.offset = total_;
  e.weight_decay = weight_decay;
  total_ += e.numel;
  index_[name] = entries_.size();
  entries_.push_back(std::move(e));
  return entries_.back().offset;
}

const ParamEntry* ParamTable::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

ParamRef ParamTable::ref(const std::string& name) const {
  const ParamRef r = find_ref(name);
  BERTCC_CHECK(r, "parameter table: no tensor '", name, "'");
  return r;
}

ParamRef ParamTable::find_ref(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? ParamRef{} : ParamRef{static_cast<int32_t>(it->second)};
}

const ParamEntry& ParamTable::at(const std::string& name) const {
  const ParamEntry* e = find(name);
  BERTCC_CHECK(e, "parameter table: no tensor named '", name, "'");
  return *e;
}

void ParamTable::set_trainable(const std::string& name, bool trainable) {
  at(name);
  entries_[index_.at(name)].trainable = trainable;
}

void ParamTable::set_lr_scale(const std::string& name, float scale) {
  at(name);
  entries_[index_.at(name)].lr_scale = scale;
}

}  // namespace bertcc
