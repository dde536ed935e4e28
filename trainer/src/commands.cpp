// fanstore-train's commands: --describe builds a model and prints its layer table.
#include "trainer/commands.hpp"

#include <exception>
#include <new>
#include <ostream>
#include <string>

namespace fanstore::trainer {

std::string error_text(const std::exception& error) {
  if (dynamic_cast<const std::bad_alloc*>(&error))
    return "out of memory (std::bad_alloc): the model's parameters and activations at this --input-size and "
           "--batch (and --classes, where given) need more memory than this process could get; pass a smaller "
           "--input-size or --batch (or --classes), or split each sample over more ranks with --grid "
           "(docs/parallelism.md)";
  return error.what();
}

int describe_command(const DescribeOptions& options, std::ostream& out, std::ostream& err) {
  try {
    auto model = build_model(options.model, make_cpu_backend(), options.model_options);
    out << "model: " << model->name() << "  input: " << model->input_shape().to_string()
        << "  output: " << model->output_shape().to_string() << "\n";
    out << model->describe();
    return 0;
  } catch (const std::exception& e) {
    err << "fanstore-train: error: " << error_text(e) << "\n";
    return 1;
  }
}

}  // namespace fanstore::trainer
