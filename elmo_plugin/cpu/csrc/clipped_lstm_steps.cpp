// The inference/training forward time loop of `packed_clipped_lstm` with each step's gate
// arithmetic fused into one pass over the rows (see packed_clipped_lstm.forward_steps, the
// same computation as separate torch ops).
#include <ATen/ATen.h>
#include <ATen/cpu/vec/vec.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <algorithm>
#include <optional>
#include <vector>

namespace {

using Vec = at::vec::Vectorized<float>;

// x (rows >= 1, K) W^T for W prepacked by torch.ops.mkldnn._reorder_linear_weight: the op
// onednn_matmul.onednn_linear calls, through the dispatcher (it has no C++ header)
at::Tensor prepacked_linear(const at::Tensor& x, const at::Tensor& weight) {
  static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("mkldnn::_linear_pointwise", "");
  std::vector<c10::IValue> stack{x, weight, c10::IValue(), c10::IValue(std::string("none")),
                                 c10::IValue(c10::List<std::optional<at::Scalar>>()), c10::IValue()};
  op.callBoxed(&stack);
  return stack[0].toTensor();
}

Vec sigmoid(Vec x) {
  const Vec one(1.0f);
  return one / (one + x.neg().exp());
}

Vec tanh_via_sigmoid(Vec x) {  // 2 sigmoid(2 x) - 1, as tanh_via_sigmoid in Python
  return Vec(-1.0f) + Vec(2.0f) * sigmoid(x + x);
}

// One row's cells: gates (4 * cells) i, f, g, o before activation (+ recurrent when given),
// written back activated into `activated` unless it is null.
void cell_row(const float* gates, float* activated, const float* recurrent, const float* memory0, float* memory,
              float* tanh_memory, float* hidden, int64_t cells, std::optional<double> cell_clip) {
  const float clip = cell_clip ? static_cast<float>(*cell_clip) : 0.0f;
  const Vec low(-clip), high(clip);
  for (int64_t j = 0; j < cells; j += Vec::size()) {
    const int64_t count = std::min<int64_t>(Vec::size(), cells - j);
    Vec z[4];
    for (int k = 0; k < 4; ++k) {
      z[k] = Vec::loadu(gates + k * cells + j, count);
      if (recurrent) z[k] = z[k] + Vec::loadu(recurrent + k * cells + j, count);
    }
    const Vec i = sigmoid(z[0]), f = sigmoid(z[1]), g = tanh_via_sigmoid(z[2]), o = sigmoid(z[3]);
    Vec m = i * g;
    if (memory0) m = m + f * Vec::loadu(memory0 + j, count);
    if (cell_clip) m = at::vec::clamp(m, low, high);
    const Vec t = tanh_via_sigmoid(m);
    m.store(memory + j, count);
    t.store(tanh_memory + j, count);
    (o * t).store(hidden + j, count);
    if (activated) {
      i.store(activated + j, count);
      f.store(activated + cells + j, count);
      g.store(activated + 2 * cells + j, count);
      o.store(activated + 3 * cells + j, count);
    }
  }
}

// packed_clipped_lstm.forward_steps, the same arguments and shapes: gates (n or distinct rows,
// 4 * cells), gate_rows (n,) or none, memory (n, cells), tanh_memory and hidden (n or sizes[0],
// cells), states (n, proj), w_hh and w_hr prepacked; step t's rows are [start, start + sizes[t]).
void forward_steps(at::Tensor gates, const std::optional<at::Tensor>& gate_rows, at::Tensor memory,
                   at::Tensor tanh_memory, at::Tensor hidden, at::Tensor states, const at::Tensor& w_hh,
                   const at::Tensor& w_hr, bool prepacked, const std::optional<at::Tensor>& state0,
                   const std::optional<at::Tensor>& memory0, c10::IntArrayRef sizes, std::optional<double> cell_clip,
                   std::optional<double> proj_clip, bool every_step) {
  const int64_t cells = memory.size(1);
  int64_t positions = 0;
  for (size_t t = 0; t < sizes.size(); ++t) {
    TORCH_CHECK(sizes[t] > 0 && (t == 0 || sizes[t] <= sizes[t - 1]),
                "clipped_lstm_steps: sizes must be positive and non-increasing");
    positions += sizes[t];
  }
  const int64_t first = sizes.empty() ? 0 : sizes[0], kept_rows = every_step ? positions : first;
  TORCH_CHECK(prepacked && gates.scalar_type() == at::kFloat && memory.scalar_type() == at::kFloat,
              "clipped_lstm_steps: float32 and prepacked weights only");
  TORCH_CHECK(gates.is_contiguous() && memory.is_contiguous() && tanh_memory.is_contiguous() &&
              hidden.is_contiguous() && states.is_contiguous(), "clipped_lstm_steps: outputs must be contiguous");
  TORCH_CHECK(gates.dim() == 2 && gates.size(1) == 4 * cells && memory.size(0) == positions &&
              states.size(0) == positions && tanh_memory.size(0) >= kept_rows && hidden.size(0) >= kept_rows &&
              tanh_memory.size(1) == cells && hidden.size(1) == cells,
              "clipped_lstm_steps: gates (rows, 4 * cells), memory and states (n, .), tanh_memory and hidden "
              "(n or sizes[0], cells) for n = sum(sizes)");
  TORCH_CHECK(gate_rows || gates.size(0) == positions, "clipped_lstm_steps: gates need n rows");
  TORCH_CHECK(!gate_rows || (gate_rows->is_contiguous() && gate_rows->scalar_type() == at::kLong &&
                             gate_rows->numel() == positions),
              "clipped_lstm_steps: gate_rows must be n contiguous int64");
  TORCH_CHECK(!state0 || state0->size(0) == first, "clipped_lstm_steps: state0 needs sizes[0] rows");
  TORCH_CHECK(!memory0 || (memory0->size(0) == first && memory0->size(1) == cells),
              "clipped_lstm_steps: memory0 needs (sizes[0], cells)");
  const int64_t* rows = gate_rows ? gate_rows->data_ptr<int64_t>() : nullptr;
  float* const gates_data = gates.data_ptr<float>();
  float* const memory_data = memory.data_ptr<float>();
  float* const tanh_memory_data = tanh_memory.data_ptr<float>();
  float* const hidden_data = hidden.data_ptr<float>();
  int64_t start = 0, previous = 0;
  for (size_t step = 0; step < sizes.size(); ++step) {
    const int64_t size = sizes[step], end = start + size;
    std::optional<at::Tensor> step_state0, step_memory0;
    if (step > 0) {
      step_state0 = states.narrow(0, previous, size);
      step_memory0 = memory.narrow(0, previous, size);
    } else {
      if (state0) step_state0 = *state0;
      if (memory0) step_memory0 = memory0->contiguous();
    }
    at::Tensor recurrent;
    if (step_state0) recurrent = prepacked_linear(*step_state0, w_hh).contiguous();
    const int64_t kept = every_step ? start : 0;  // where this step's tanh_memory and hidden rows begin
    const float* step_recurrent = recurrent.defined() ? recurrent.data_ptr<float>() : nullptr;
    const float* step_memory0_rows = step_memory0 ? step_memory0->data_ptr<float>() : nullptr;
    for (int64_t r = 0; r < size; ++r) {
      const int64_t row = rows ? rows[start + r] : start + r;
      TORCH_CHECK(row >= 0 && row < gates.size(0), "clipped_lstm_steps: gate_rows[", start + r, "] = ", row,
                  " is not a row of gates");
      float* row_gates = gates_data + row * 4 * cells;
      // training keeps the activated gates (its backward reads them); inference leaves them
      cell_row(row_gates, every_step && !rows ? row_gates : nullptr,
               step_recurrent ? step_recurrent + r * 4 * cells : nullptr,
               step_memory0_rows ? step_memory0_rows + r * cells : nullptr, memory_data + (start + r) * cells,
               tanh_memory_data + (kept + r) * cells, hidden_data + (kept + r) * cells, cells, cell_clip);
    }
    at::Tensor projected = prepacked_linear(hidden.narrow(0, kept, size), w_hr);
    at::Tensor step_states = states.narrow(0, start, size);
    if (proj_clip) at::clamp_out(step_states, projected, -*proj_clip, *proj_clip);
    else step_states.copy_(projected);
    previous = start;
    start = end;
  }
}

}  // namespace

TORCH_LIBRARY(elmo_plugin, m) {
  m.def("clipped_lstm_steps(Tensor(a!) gates, Tensor? gate_rows, Tensor(b!) memory, Tensor(c!) tanh_memory, "
        "Tensor(d!) hidden, Tensor(e!) states, Tensor w_hh, Tensor w_hr, bool prepacked, Tensor? state0, "
        "Tensor? memory0, int[] sizes, float? cell_clip, float? proj_clip, bool every_step) -> ()",
        &forward_steps);  // for every backend: the prepacked weights are MkldnnCPU tensors
}
