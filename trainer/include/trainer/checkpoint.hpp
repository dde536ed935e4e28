// Versioned binary checkpoints (docs/training.md, "Checkpoint format"), written atomically.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "trainer/model.hpp"
#include "trainer/optim.hpp"

namespace fanstore::trainer {

inline constexpr char kCheckpointMagic[8] = {'F', 'S', 'T', 'R', 'C', 'K', 'P', 'T'};
// Version 4 adds every parameter's and buffer's name and shape, so that a checkpoint of another model
// configuration is refused naming the first that differs; version 3 adds the tournament's learning-rate scale;
// versions 3 and 2 still load (version 2 with scale 1). Version 2:
// the shuffle and the dropout masks come from Philox (fanstore/random.hpp); version 1 was written
// while they came from xoshiro256**, whose data order a resumed run can no longer reproduce.
inline constexpr std::uint32_t kCheckpointVersion = 4;

// Where training stands; with the seed it fixes the data order (the shuffle and the augmentation
// are pure functions of (seed, epoch, sample)), so this is the whole RNG/shuffle state.
struct TrainingPosition {
  std::uint64_t global_step = 0;  // optimizer steps completed
  std::uint64_t epoch = 0;        // epoch of the next step
  std::uint64_t next_batch = 0;   // batch of that epoch to run next
  std::uint64_t seed = 0;
  std::uint64_t world_size = 1;  // data-parallel ranks that produced it
  std::uint64_t batch_per_rank = 0;
  double lr_scale = 1;  // tournament training: this trainer's learning-rate factor (--ltfb-mutate)
};

// A checkpoint's position on another batching (--resume with another number of sample groups or batch): the
// epoch's samples already trained are next_batch x world_size x batch_per_rank positions of the epoch's shuffle
// (every group takes its strided share of one global order), so the epoch goes on at that many samples divided
// by the new global batch, `groups` x `batch`, rounded down (up to one new batch's samples are trained again in
// that epoch); an epoch that is then done moves on to the next epoch's start. The step count becomes the
// same point of the run in the new batching, epoch x `steps_per_epoch` + next batch, so that the learning-rate
// schedule and --max-steps, which count steps of this batching, take the run up where it stopped.
TrainingPosition rebatch_position(const TrainingPosition& position, std::uint64_t groups, std::uint64_t batch,
                                  std::uint64_t steps_per_epoch);

class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Writes PATH.tmp, fsyncs it and renames it over PATH, so a crash leaves the old or the new file.
// `state` is optimizer.whole_state(), and `gathered_values` model.parameters().read(Arena::Values) where the
// table keeps a part of the values only (empty otherwise: the arena is written as it is): with sharded state
// or weights collectives, so every rank of the group gathers them and one writes. The file is the same
// whatever the grid, so it resumes on any grid.
void save_checkpoint(const std::string& path, const Model& model, const Optimizer& optimizer,
                     const std::vector<float>& gathered_values,
                     const std::vector<std::pair<std::string, std::vector<float>>>& state,
                     const TrainingPosition& position);
// The same for an optimizer that is not sharded (throws std::logic_error for a sharded one).
void save_checkpoint(const std::string& path, const Model& model, Optimizer& optimizer,
                     const TrainingPosition& position);

// Restores parameters, buffers (BN running statistics), optimizer state (a sharded optimizer keeps
// its part) and step count; checks the
// magic, version, model, parameter table and optimizer, and a checksum; throws CheckpointError with
// a one-line reason naming the file.
TrainingPosition load_checkpoint(const std::string& path, Model& model, Optimizer& optimizer);

// The two halves of load_checkpoint, so that one rank can read the file and every rank restore from
// the same bytes (`path` only names the file in messages).
std::vector<char> read_checkpoint_file(const std::string& path);
TrainingPosition restore_checkpoint(const std::string& path, std::vector<char> bytes, Model& model,
                                    Optimizer& optimizer);

}  // namespace fanstore::trainer
