// Checkpoint writer/reader: explicit little-endian fields, a table signature and an FNV-1a checksum.
#include "trainer/checkpoint.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <utility>
#include <vector>

#include "trainer/backend.hpp"

namespace fanstore::trainer {
namespace {

// Floats and integers are stored little-endian; on a big-endian host the bytes would be swapped
// here. Every supported host (x86-64, aarch64) is little-endian, so refuse to build otherwise.
static_assert(std::endian::native == std::endian::little, "checkpoint I/O assumes a little-endian host");

std::uint64_t fnv1a(const void* data, std::size_t n, std::uint64_t h = 0xcbf29ce484222325ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

// Names and shapes of every parameter and buffer: a checkpoint only fits the same table.
std::uint64_t table_signature(const ParameterTable& t) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (const auto* list : {&t.parameters(), &t.buffers()})
    for (const auto& e : *list) {
      h = fnv1a(e.name.data(), e.name.size(), h);
      for (auto d : e.shape.dims) h = fnv1a(&d, sizeof d, h);
    }
  return h;
}

// Every parameter's and buffer's name and shape, in the table's order (version 4's layer shapes).
using LayerShapes = std::vector<std::pair<std::string, std::vector<std::int64_t>>>;
LayerShapes layer_shapes(const ParameterTable& t) {
  LayerShapes shapes;
  for (const auto* list : {&t.parameters(), &t.buffers()})
    for (const auto& e : *list) shapes.emplace_back(e.name, e.shape.dims);
  return shapes;
}

std::string dims_text(const std::vector<std::int64_t>& dims) {
  std::string s = "[";
  for (std::size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

// The first difference between a checkpoint's layer shapes and this model's (`here`, whose first `parameters` are
// parameters, then buffers), as one line's start: what differs, then the likely cause (the first layer: the
// input's channels; the output layer, the last with parameters: the classes; the others: the input's size).
std::string shapes_difference(const LayerShapes& stored, const LayerShapes& here, std::size_t parameters) {
  const auto layer = [](const std::string& name) { return name.substr(0, name.rfind('.')); };
  const std::string first = here.empty() ? "" : layer(here.front().first);
  const std::string output = parameters == 0 ? "" : layer(here[parameters - 1].first);
  for (std::size_t i = 0; i < std::min(stored.size(), here.size()); ++i) {
    const auto& [name, dims] = here[i];
    if (stored[i].first != name)
      return "its entry " + std::to_string(i) + " is " + stored[i].first + ", here " + name +
             " (another model version?)";
    if (stored[i].second == dims) continue;
    const std::string hint = layer(name) == first    ? "other channels in the data?"
                             : layer(name) == output ? "other classes in the data, or --classes?"
                                                     : "another input size of the data, or --input-size?";
    return name + " is " + dims_text(stored[i].second) + " in the checkpoint and " + dims_text(dims) + " here (" +
           hint + ")";
  }
  return "it has " + std::to_string(stored.size()) + " parameters and buffers, this model " +
         std::to_string(here.size()) + " (another model version?)";
}

// Streams the fields into `path`.tmp through a small buffer with a running checksum (a whole
// checkpoint held in memory would add its size to the peak of the rank that writes it); commit()
// appends the checksum and makes the file durable, then visible as `path`.
class Writer {
 public:
  explicit Writer(std::string path) : path_(std::move(path)), tmp_(path_ + ".tmp") {
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) throw CheckpointError(tmp_ + ": cannot create (" + std::strerror(errno) + ")");
    buffer_.reserve(kBuffer);
  }
  // A write that failed (a full disk, an I/O error) or never finished leaves no partial PATH.tmp behind.
  ~Writer() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(tmp_.c_str());
  }
  void bytes(const void* p, std::size_t n) {
    checksum_ = fnv1a(p, n, checksum_);
    const auto* c = static_cast<const char*>(p);
    while (n > 0) {
      const std::size_t piece = std::min(n, kBuffer - buffer_.size());
      buffer_.insert(buffer_.end(), c, c + piece);
      c += piece;
      n -= piece;
      if (buffer_.size() == kBuffer) flush();
    }
  }
  void u64(std::uint64_t v) { bytes(&v, sizeof v); }
  void u32(std::uint32_t v) { bytes(&v, sizeof v); }
  void str(const std::string& s) {
    u64(s.size());
    bytes(s.data(), s.size());
  }
  void floats(const float* p, std::size_t n) {
    u64(n);
    bytes(p, n * sizeof(float));
  }
  void commit() {
    const std::uint64_t checksum = checksum_;
    u64(checksum);
    flush();
    // Durable before visible: rename only after the bytes are on disk.
    const int fd = std::exchange(fd_, -1);
    if (::fsync(fd) != 0 || ::close(fd) != 0)
      throw CheckpointError(tmp_ + ": fsync/close failed (" + std::strerror(errno) + ")");
    if (std::rename(tmp_.c_str(), path_.c_str()) != 0)
      throw CheckpointError(path_ + ": rename from .tmp failed (" + std::strerror(errno) + ")");
    committed_ = true;
  }

 private:
  static constexpr std::size_t kBuffer = 1 << 20;
  void flush() {
    const char* data = buffer_.data();
    std::size_t left = buffer_.size();
    while (left > 0) {
      const ssize_t n = ::write(fd_, data, left);
      if (n < 0) {
        if (errno == EINTR) continue;
        throw CheckpointError(tmp_ + ": write failed (" + std::strerror(errno) + ")");
      }
      data += n;
      left -= static_cast<std::size_t>(n);
    }
    buffer_.clear();
  }

  std::string path_, tmp_;
  int fd_ = -1;
  bool committed_ = false;
  std::vector<char> buffer_;
  std::uint64_t checksum_ = 0xcbf29ce484222325ull;  // fnv1a's offset basis
};

class Reader {
 public:
  Reader(std::string path, std::vector<char> data) : path_(std::move(path)), data_(std::move(data)) {}
  void bytes(void* p, std::size_t n) {
    if (n > data_.size() - pos_) fail("truncated (ends inside a field); the file is damaged, use an older checkpoint");
    std::memcpy(p, data_.data() + pos_, n);
    pos_ += n;
  }
  std::uint64_t u64() {
    std::uint64_t v;
    bytes(&v, sizeof v);
    return v;
  }
  std::uint32_t u32() {
    std::uint32_t v;
    bytes(&v, sizeof v);
    return v;
  }
  std::string str() {
    const auto n = u64();
    if (n > 4096) fail("corrupt string length");
    std::string s(n, '\0');
    bytes(s.data(), n);
    return s;
  }
  void floats(float* p, std::size_t expected, const std::string& what) {
    const auto n = u64();
    if (n != expected) fail(what + " has " + std::to_string(n) + " floats, this model has " + std::to_string(expected));
    bytes(p, n * sizeof(float));
  }
  [[noreturn]] void fail(const std::string& why) const { throw CheckpointError(path_ + ": " + why); }

 private:
  std::string path_;
  std::vector<char> data_;
  std::size_t pos_ = 0;
};

}  // namespace

void save_checkpoint(const std::string& path, const Model& model, Optimizer& optimizer, const TrainingPosition& p) {
  if (optimizer.sharded())
    throw std::logic_error("save_checkpoint: a sharded optimizer's state is gathered by every rank (whole_state)");
  // Whole values: GridRun::shard shards them only with the optimizer.
  save_checkpoint(path, model, optimizer, {}, optimizer.whole_state(), p);
}

void save_checkpoint(const std::string& path, const Model& model, const Optimizer& optimizer,
                     const std::vector<float>& gathered_values,
                     const std::vector<std::pair<std::string, std::vector<float>>>& state, const TrainingPosition& p) {
  const ParameterTable& t = model.parameters();
  Writer w(path);
  w.bytes(kCheckpointMagic, sizeof kCheckpointMagic);
  w.u32(kCheckpointVersion);
  w.str(model.name());
  w.u64(table_signature(t));
  const LayerShapes shapes = layer_shapes(t);
  w.u64(shapes.size());
  for (const auto& [name, dims] : shapes) {
    w.str(name);
    w.u64(dims.size());
    for (auto d : dims) w.u64(static_cast<std::uint64_t>(d));
  }
  w.str(optimizer.name());
  for (auto v : {p.global_step, p.epoch, p.next_batch, p.seed, p.world_size, p.batch_per_rank}) w.u64(v);
  w.u64(std::bit_cast<std::uint64_t>(p.lr_scale));
  w.u64(optimizer.steps_taken());
  for (Arena arena : {Arena::Values, Arena::Buffers}) {
    if (arena == Arena::Values && t.values_sharded()) {
      if (gathered_values.size() != t.parameter_count())
        throw std::logic_error("save_checkpoint: the table keeps a part of the values; gather them (read) first");
      w.floats(gathered_values.data(), gathered_values.size());
      continue;
    }
    const Tensor host = t.backend().to_host(t.arena(arena));  // host arenas as they are: no copy
    w.floats(host.data(), static_cast<std::size_t>(host.numel()));
  }
  w.u64(state.size());
  for (const auto& [name, whole] : state) {
    if (whole.size() != t.parameter_count())
      throw std::logic_error("save_checkpoint: optimizer state '" + name + "' is not whole");
    w.str(name);
    w.floats(whole.data(), whole.size());
  }
  w.commit();
}

std::vector<char> read_checkpoint_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw CheckpointError(path + ": cannot open checkpoint");
  return std::vector<char>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TrainingPosition load_checkpoint(const std::string& path, Model& model, Optimizer& optimizer) {
  return restore_checkpoint(path, read_checkpoint_file(path), model, optimizer);
}

TrainingPosition restore_checkpoint(const std::string& path, std::vector<char> data, Model& model,
                                    Optimizer& optimizer) {
  if (data.size() < sizeof kCheckpointMagic + 12) throw CheckpointError(path + ": too short to be a checkpoint");
  std::uint64_t stored_sum;
  std::memcpy(&stored_sum, data.data() + data.size() - 8, 8);
  Reader r(path, data);
  char magic[8];
  r.bytes(magic, sizeof magic);
  if (std::memcmp(magic, kCheckpointMagic, sizeof magic) != 0) r.fail("not a fanstore-train checkpoint (bad magic)");
  const auto version = r.u32();
  if (version < 2 || version > kCheckpointVersion)
    r.fail("checkpoint version " + std::to_string(version) + " is not 2 to " + std::to_string(kCheckpointVersion) +
           " (this fanstore-train): use the fanstore-train that wrote it, or start without --resume");
  if (fnv1a(data.data(), data.size() - 8) != stored_sum) r.fail("checksum mismatch; the file is damaged");
  const auto model_name = r.str();
  if (model_name != model.name()) r.fail("checkpoint is for model '" + model_name + "', not '" + model.name() + "'");
  ParameterTable& t = model.parameters();
  const std::uint64_t signature = r.u64();
  LayerShapes stored;  // version 4 on
  if (version >= 4) {
    const auto count = r.u64();
    if (count > data.size()) r.fail("corrupt layer-shape count");
    for (std::uint64_t i = 0; i < count; ++i) {
      std::string name = r.str();
      const auto rank = r.u64();
      if (rank > 8) r.fail("corrupt layer shape");
      std::vector<std::int64_t> dims(static_cast<std::size_t>(rank));
      for (auto& d : dims) d = static_cast<std::int64_t>(r.u64());
      stored.emplace_back(std::move(name), std::move(dims));
    }
  }
  if (signature != table_signature(t)) {
    const std::string resume_hint = "resume with the data and options it was written with, or start without --resume";
    if (version >= 4) r.fail(shapes_difference(stored, layer_shapes(t), t.parameters().size()) + ": " + resume_hint);
    r.fail(
        "its layer shapes are not this model's (other classes, input size or channels of the data, or another "
        "model version): " +
        resume_hint);
  }
  const auto optimizer_name = r.str();
  if (optimizer_name != optimizer.name())
    r.fail("checkpoint was written with --optimizer " + optimizer_name + ", not " + optimizer.name());
  TrainingPosition p;
  for (auto* v : {&p.global_step, &p.epoch, &p.next_batch, &p.seed, &p.world_size, &p.batch_per_rank}) *v = r.u64();
  if (version >= 3) p.lr_scale = std::bit_cast<double>(r.u64());
  optimizer.set_steps_taken(r.u64());
  std::vector<float> values(t.parameter_count()), buffers(t.buffer_count());
  r.floats(values.data(), values.size(), "parameters");
  r.floats(buffers.data(), buffers.size(), "buffers");
  auto state = optimizer.state();
  if (r.u64() != state.size()) r.fail("optimizer state count differs");
  std::vector<std::vector<float>> state_values;
  for (auto& [name, arena] : state) {
    if (r.str() != name) r.fail("optimizer state '" + name + "' missing");
    state_values.emplace_back(t.parameter_count());
    r.floats(state_values.back().data(), state_values.back().size(), "optimizer state " + name);
  }
  const ArenaPart part = optimizer.part();  // a sharded optimizer keeps its part
  // Everything read and checked: only now overwrite the model, so a bad file leaves it untouched.
  t.write(Arena::Values, values);
  t.write(Arena::Buffers, buffers);
  for (std::size_t i = 0; i < state.size(); ++i)
    t.backend().copy(Tensor::view(state[i].second.shape(), state_values[i].data() + part.begin), state[i].second);
  return p;
}

TrainingPosition rebatch_position(const TrainingPosition& position, std::uint64_t groups, std::uint64_t batch,
                                  std::uint64_t steps_per_epoch) {
  TrainingPosition p = position;
  p.world_size = groups;
  p.batch_per_rank = batch;
  const std::uint64_t per_step = groups * batch;
  if (per_step == 0 || steps_per_epoch == 0) throw std::invalid_argument("rebatch_position: an empty batching");
  const std::uint64_t samples_done = position.next_batch * position.world_size * position.batch_per_rank;
  p.next_batch = samples_done / per_step;
  if (p.next_batch >= steps_per_epoch) {
    p.epoch += 1;
    p.next_batch = 0;
  }
  p.global_step = p.epoch * steps_per_epoch + p.next_batch;
  return p;
}

}  // namespace fanstore::trainer
