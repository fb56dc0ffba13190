// The time loops of the CPU fast path (elmo_plugin/cpu/packed_clipped_lstm.py), one direction of
// one layer over packed sequences: each step's two matmuls through oneDNN with prepacked weights,
// and each step's gate arithmetic (forward) or gate-gradient arithmetic (backward) in one pass
// over each row. The definition they are tested against: elmo_plugin/modules/clipped_lstm.py.
#include <ATen/ATen.h>
#include <ATen/cpu/vec/vec.h>
#include <ATen/Functions.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <algorithm>
#include <initializer_list>
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

Vec tanh_via_sigmoid(Vec x) {  // 2 sigmoid(2 x) - 1: one sigmoid for the four gates, equal within rounding
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

void check_sizes(c10::IntArrayRef sizes, const char* op) {
  for (size_t t = 0; t < sizes.size(); ++t)
    TORCH_CHECK(sizes[t] > 0 && (t == 0 || sizes[t] <= sizes[t - 1]), op,
                ": sizes must be positive and non-increasing");
}

// The forward time loop: gates (n or distinct rows, 4 * cells) = x W_ih + b, activated in place
// when every_step (the backward reads them), or with gate_rows (n,) the distinct rows' gates,
// position i's in row gate_rows[i], left as they are; fills memory (n, cells), tanh_memory and
// hidden (n or sizes[0], cells: every position when every_step, else one step's rows) and states
// (n, proj); w_hh and w_hr prepacked by torch.ops.mkldnn._reorder_linear_weight; state0
// (sizes[0], proj) and memory0 (sizes[0], cells) before the first step, none for zero. Step t's
// rows are [start, start + sizes[t]); the rows of a step are a prefix of the step before's.
void forward_steps(at::Tensor gates, const std::optional<at::Tensor>& gate_rows, at::Tensor memory,
                   at::Tensor tanh_memory, at::Tensor hidden, at::Tensor states, const at::Tensor& w_hh,
                   const at::Tensor& w_hr, const std::optional<at::Tensor>& state0,
                   const std::optional<at::Tensor>& memory0, c10::IntArrayRef sizes, std::optional<double> cell_clip,
                   std::optional<double> proj_clip, bool every_step) {
  const int64_t cells = memory.size(1);
  check_sizes(sizes, "clipped_lstm_forward_steps");
  int64_t positions = 0;
  for (const int64_t size : sizes) positions += size;
  const int64_t first = sizes.empty() ? 0 : sizes[0], kept_rows = every_step ? positions : first;
  TORCH_CHECK(w_hh.is_mkldnn() && w_hr.is_mkldnn() && gates.scalar_type() == at::kFloat &&
                  memory.scalar_type() == at::kFloat && tanh_memory.scalar_type() == at::kFloat &&
                  hidden.scalar_type() == at::kFloat && states.scalar_type() == at::kFloat,
              "clipped_lstm_forward_steps: float32 and prepacked weights only");
  TORCH_CHECK(gates.is_contiguous() && memory.is_contiguous() && tanh_memory.is_contiguous() &&
              hidden.is_contiguous() && states.is_contiguous(), "clipped_lstm_forward_steps: outputs must be contiguous");
  TORCH_CHECK(gates.dim() == 2 && gates.size(1) == 4 * cells && memory.size(0) == positions &&
              states.size(0) == positions && tanh_memory.size(0) >= kept_rows && hidden.size(0) >= kept_rows &&
              tanh_memory.size(1) == cells && hidden.size(1) == cells,
              "clipped_lstm_forward_steps: gates (rows, 4 * cells), memory and states (n, .), tanh_memory and hidden "
              "(n or sizes[0], cells) for n = sum(sizes)");
  TORCH_CHECK(gate_rows || gates.size(0) == positions, "clipped_lstm_forward_steps: gates need n rows");
  TORCH_CHECK(!gate_rows || (gate_rows->is_contiguous() && gate_rows->scalar_type() == at::kLong &&
                             gate_rows->numel() == positions),
              "clipped_lstm_forward_steps: gate_rows must be n contiguous int64");
  TORCH_CHECK(!state0 || state0->size(0) == first, "clipped_lstm_forward_steps: state0 needs sizes[0] rows");
  TORCH_CHECK(!memory0 || (memory0->size(0) == first && memory0->size(1) == cells),
              "clipped_lstm_forward_steps: memory0 needs (sizes[0], cells)");
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
      TORCH_CHECK(row >= 0 && row < gates.size(0), "clipped_lstm_forward_steps: gate_rows[", start + r, "] = ", row,
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

// One row's gate gradients: activated gates (4 * cells) i, f, g, o, the row's tanh(memory), its
// (clamped) memory, the memory before this step (null: zero), the gradient reaching its hidden
// state and (null: none) the one reaching its memory as an output; carried: grad_memory holds what
// flows back into this memory through the next step's forget gate (in), keep: it gets what flows
// on into the memory before (out).
void cell_grad_row(const float* gates, const float* tanh_memory, const float* memory, const float* memory_before,
                   const float* grad_hidden, const float* grad_memory_out, float* grad_memory, bool carried,
                   bool keep, float* grad_gates, float* grad_bias, int64_t cells, std::optional<double> cell_clip) {
  const float clip = cell_clip ? static_cast<float>(*cell_clip) : 0.0f;
  const Vec low(-clip), high(clip), zero(0.0f);
  for (int64_t j = 0; j < cells; j += Vec::size()) {
    const int64_t count = std::min<int64_t>(Vec::size(), cells - j);
    const Vec i = Vec::loadu(gates + j, count), f = Vec::loadu(gates + cells + j, count),
              g = Vec::loadu(gates + 2 * cells + j, count), o = Vec::loadu(gates + 3 * cells + j, count);
    const Vec t = Vec::loadu(tanh_memory + j, count), grad_h = Vec::loadu(grad_hidden + j, count);
    const Vec d_o = grad_h * t * (o - o * o);  // sigmoid' = s - s * s
    Vec grad_cell = grad_h * (o - (o * t) * t);  // d(hidden) * o * (1 - tanh^2)
    if (grad_memory_out) grad_cell = grad_cell + Vec::loadu(grad_memory_out + j, count);
    if (carried) grad_cell = grad_cell + Vec::loadu(grad_memory + j, count);
    if (cell_clip) {  // the clamp passes the gradient where it did not bind (hardtanh's backward)
      const Vec m = Vec::loadu(memory + j, count);
      grad_cell = grad_cell & ((m > low) & (m < high));
    }
    const Vec d_i = grad_cell * g * (i - i * i);
    const Vec d_g = grad_cell * (i - (i * g) * g);  // d(memory) * i * (1 - g^2)
    const Vec d_f = memory_before ? grad_cell * Vec::loadu(memory_before + j, count) * (f - f * f) : zero;
    if (keep) (grad_cell * f).store(grad_memory + j, count);
    const Vec d[4] = {d_i, d_f, d_g, d_o};
    for (int k = 0; k < 4; ++k) {
      d[k].store(grad_gates + k * cells + j, count);
      (Vec::loadu(grad_bias + k * cells + j, count) + d[k]).store(grad_bias + k * cells + j, count);
    }
  }
}

// The backward time loop, last step first: gates (n, 4 * cells) as the forward activated them,
// memory (clamped), tanh_memory (n, cells) and states (n, proj, clamped) from the forward;
// grad_states (n, proj), the gradient reaching each state from outside, gets in place what flows
// back through time and the projection clip's mask; grad_memory_out (n, cells) or none, the one
// reaching each memory from outside. Fills grad_gates (n, 4 * cells) w.r.t. the pre-activation
// gates, grad_bias (4 * cells) and, where given, grad_state0 (sizes[0], proj) and grad_memory0
// (sizes[0], cells) w.r.t. the state before the first step. w_hh_t and w_hr_t: torch's
// (4 * cells, proj) and (proj, cells) weights transposed (grad @ W), prepacked; memory0
// (sizes[0], cells) or none for zero.
void backward_steps(const at::Tensor& gates, const at::Tensor& memory, const at::Tensor& tanh_memory,
                    const at::Tensor& states, at::Tensor grad_states, const std::optional<at::Tensor>& grad_memory_out,
                    at::Tensor grad_gates, at::Tensor grad_bias, const std::optional<at::Tensor>& grad_state0,
                    const std::optional<at::Tensor>& grad_memory0, const at::Tensor& w_hh_t, const at::Tensor& w_hr_t,
                    const std::optional<at::Tensor>& memory0, c10::IntArrayRef sizes, std::optional<double> cell_clip,
                    std::optional<double> proj_clip) {
  check_sizes(sizes, "clipped_lstm_backward_steps");
  int64_t positions = 0;
  for (const int64_t size : sizes) positions += size;
  const int64_t cells = memory.size(1), first = sizes.empty() ? 0 : sizes[0];
  TORCH_CHECK(w_hh_t.is_mkldnn() && w_hr_t.is_mkldnn(), "clipped_lstm_backward_steps: prepacked weights only");
  for (const at::Tensor* tensor : std::initializer_list<const at::Tensor*>{&gates, &memory, &tanh_memory, &states, &grad_states, &grad_gates, &grad_bias})
    TORCH_CHECK(tensor->scalar_type() == at::kFloat && tensor->is_contiguous(),
                "clipped_lstm_backward_steps: contiguous float32 tensors only");
  TORCH_CHECK(gates.dim() == 2 && gates.size(0) == positions && gates.size(1) == 4 * cells &&
                  grad_gates.sizes() == gates.sizes() && memory.size(0) == positions &&
                  tanh_memory.sizes() == memory.sizes() && states.dim() == 2 && states.size(0) == positions &&
                  grad_states.sizes() == states.sizes() && grad_bias.numel() == 4 * cells,
              "clipped_lstm_backward_steps: gates and grad_gates (n, 4 * cells), memory and tanh_memory "
              "(n, cells), states and grad_states (n, proj), grad_bias (4 * cells) for n = sum(sizes)");
  TORCH_CHECK(!memory0 || (memory0->size(0) == first && memory0->size(1) == cells),
              "clipped_lstm_backward_steps: memory0 needs (sizes[0], cells)");
  TORCH_CHECK(!grad_memory_out || (grad_memory_out->is_contiguous() && grad_memory_out->scalar_type() == at::kFloat &&
                                   grad_memory_out->sizes() == memory.sizes()),
              "clipped_lstm_backward_steps: grad_memory_out must be contiguous float32 (n, cells)");
  TORCH_CHECK(!grad_state0 || (grad_state0->is_contiguous() && grad_state0->scalar_type() == at::kFloat &&
                               grad_state0->dim() == 2 && grad_state0->size(0) == first &&
                               grad_state0->size(1) == states.size(1)),
              "clipped_lstm_backward_steps: grad_state0 must be contiguous float32 (sizes[0], proj)");
  TORCH_CHECK(!grad_memory0 || (grad_memory0->is_contiguous() && grad_memory0->scalar_type() == at::kFloat &&
                                grad_memory0->dim() == 2 && grad_memory0->size(0) == first &&
                                grad_memory0->size(1) == cells),
              "clipped_lstm_backward_steps: grad_memory0 must be contiguous float32 (sizes[0], cells)");
  const at::Tensor memory0_rows = memory0 ? memory0->contiguous() : at::Tensor();
  // what flows into a step's memory through the next step's forget gate: the next step's rows
  const at::Tensor grad_memory = at::empty({first, cells}, memory.options());
  grad_bias.zero_();
  const float* const gates_data = gates.data_ptr<float>();
  const float* const memory_data = memory.data_ptr<float>();
  const float* const tanh_memory_data = tanh_memory.data_ptr<float>();
  float* const grad_gates_data = grad_gates.data_ptr<float>();
  float* const grad_bias_data = grad_bias.data_ptr<float>();
  float* const grad_memory_data = grad_memory.data_ptr<float>();
  const float* const grad_memory_out_data = grad_memory_out ? grad_memory_out->data_ptr<float>() : nullptr;
  int64_t end = positions, carried_rows = 0;
  for (int64_t step = static_cast<int64_t>(sizes.size()) - 1; step >= 0; --step) {
    const int64_t size = sizes[step], start = end - size;
    const int64_t previous = step > 0 ? start - sizes[step - 1] : 0;  // where the step before began
    at::Tensor step_grad_states = grad_states.narrow(0, start, size);
    if (proj_clip)
      at::hardtanh_backward_out(step_grad_states, step_grad_states, states.narrow(0, start, size), -*proj_clip,
                                *proj_clip);
    const at::Tensor grad_hidden = prepacked_linear(step_grad_states, w_hr_t).contiguous();
    const float* const grad_hidden_data = grad_hidden.data_ptr<float>();
    const float* const before =
        step > 0 ? memory_data + previous * cells : (memory0 ? memory0_rows.data_ptr<float>() : nullptr);
    for (int64_t r = 0; r < size; ++r) {
      const int64_t row = start + r;
      cell_grad_row(gates_data + row * 4 * cells, tanh_memory_data + row * cells, memory_data + row * cells,
                    before ? before + r * cells : nullptr, grad_hidden_data + r * cells,
                    grad_memory_out_data ? grad_memory_out_data + row * cells : nullptr, grad_memory_data + r * cells,
                    r < carried_rows, step > 0 || grad_memory0.has_value(), grad_gates_data + row * 4 * cells,
                    grad_bias_data, cells, cell_clip);
    }
    // through the recurrent matmul into the states of the step before
    if (step > 0)
      grad_states.narrow(0, previous, size).add_(prepacked_linear(grad_gates.narrow(0, start, size), w_hh_t));
    else if (grad_state0)
      grad_state0->copy_(prepacked_linear(grad_gates.narrow(0, 0, size), w_hh_t));
    carried_rows = size;
    end = start;
  }
  if (grad_memory0) grad_memory0->copy_(grad_memory);  // what flowed on from the first step
}

}  // namespace

TORCH_LIBRARY(elmo_plugin, m) {  // for every backend: the prepacked weights are MkldnnCPU tensors
  m.def("clipped_lstm_forward_steps(Tensor(a!) gates, Tensor? gate_rows, Tensor(b!) memory, "
        "Tensor(c!) tanh_memory, Tensor(d!) hidden, Tensor(e!) states, Tensor w_hh, Tensor w_hr, Tensor? state0, "
        "Tensor? memory0, int[] sizes, float? cell_clip, float? proj_clip, bool every_step) -> ()",
        &forward_steps);
  m.def("clipped_lstm_backward_steps(Tensor gates, Tensor memory, Tensor tanh_memory, Tensor states, "
        "Tensor(a!) grad_states, Tensor? grad_memory_out, Tensor(b!) grad_gates, Tensor(c!) grad_bias, "
        "Tensor(d!)? grad_state0, Tensor(e!)? grad_memory0, Tensor w_hh_t, Tensor w_hr_t, Tensor? memory0, "
        "int[] sizes, float? cell_clip, float? proj_clip) -> ()",
        &backward_steps);
}
