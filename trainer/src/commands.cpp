// fanstore-train's commands: --describe builds a model and prints its layer table.
#include "trainer/commands.hpp"

#include <exception>
#include <ostream>

namespace fanstore::trainer {

int describe_command(const DescribeOptions& options, std::ostream& out, std::ostream& err) {
  try {
    auto model = build_model(options.model, make_cpu_backend(), options.model_options);
    out << "model: " << model->name() << "  input: " << model->input_shape().to_string()
        << "  output: " << model->output_shape().to_string() << "\n";
    out << model->describe();
    return 0;
  } catch (const std::exception& e) {
    err << "fanstore-train: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace fanstore::trainer
