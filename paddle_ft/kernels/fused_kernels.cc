// Fused CPU kernels for training (float32), built on first use by paddle_ft/kernels/fused.py through Paddle's
// custom-operator support. Each replaces a composition of Paddle ops whose CPU kernels are slow for their size
// (docs/performance.md has the profile): the post-norm residual step `layer_norm(x + residual)` and exact GELU,
// forward and backward, attention's `softmax(scores + mask)` and attention's whole core, dropout drawing Paddle's
// own masks, a linear layer's bias and clipping by the global norm. They compute the same function as the
// composition; tests/kernels/test_fused.py holds them to it (forward and gradients, 1e-5).
// Their loops run on Paddle's own OpenMP threads: fused.py compiles them with -fopenmp and links them to the Intel
// OpenMP library Paddle ships (libiomp5, whose GOMP_* entry points GCC's OpenMP code calls), so that they share the
// thread team Paddle's matmuls use. A second pool (GCC's libgomp) fought that team's spinning threads for the cores
// and halved the bench's training speed on 2 cores. Built without OpenMP (no libiomp5 beside Paddle), they run on
// the calling thread, the same numbers.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "paddle/extension.h"
#include "paddle/phi/core/generator.h"

namespace {

// Below this many elements a kernel runs on the calling thread: waking the team costs more than it saves.
constexpr int64_t kParallelMin = 1 << 15;

// The threads a kernel over n elements runs on: the calling thread's OpenMP team size (Paddle sets it to its math
// threads), or 1.
inline int team_size(int64_t n) {
#ifdef _OPENMP
  return n >= kParallelMin ? omp_get_max_threads() : 1;
#else
  (void)n;
  return 1;
#endif
}

inline int thread_index() {
#ifdef _OPENMP
  return omp_get_thread_num();
#else
  return 0;
#endif
}

// body(r) for every row r < rows of `width` elements, the rows split evenly between the team's threads.
template <typename Body>
void for_rows(int64_t rows, int64_t width, Body body) {
  const int threads = team_size(rows * width);
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int64_t r = 0; r < rows; ++r) body(r);
}

// body(begin, end) over [0, n) in blocks (each a loop the compiler vectorises), split between the team's threads.
template <typename Body>
void for_blocks(int64_t n, Body body) {
  constexpr int64_t kBlock = 4096;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  const int threads = team_size(n);
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int64_t b = 0; b < blocks; ++b) body(b * kBlock, std::min(n, (b + 1) * kBlock));
}

// body(r, sums, thread) for every row r < rows of `width` elements, the rows split evenly between the team's threads,
// each thread adding into `columns` sums of its own (of type Sum); returns the threads' sums added in thread order:
// the same result on every run with the same number of threads (the gradients of a bias or a norm's weight).
template <typename Sum, typename Body>
std::vector<Sum> for_rows_summing(int64_t rows, int64_t width, int64_t columns, Body body) {
  const int threads = team_size(rows * width);
  std::vector<Sum> sums(columns * threads, Sum(0));
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    const int t = thread_index();
    Sum* mine = sums.data() + columns * t;
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) body(r, mine, t);
  }
  std::vector<Sum> total(columns, Sum(0));
  for (int t = 0; t < threads; ++t)
    for (int64_t j = 0; j < columns; ++j) total[j] += sums[columns * t + j];
  return total;
}

void check_float32_cpu(const paddle::Tensor& t, const char* name) {
  PD_CHECK(t.is_cpu(), name, " must be on the CPU");
  PD_CHECK(t.dtype() == paddle::DataType::FLOAT32, name, " must be float32");
}

// erf for float, as a rational function on [-4, 4] (erf is +-1 in float beyond): the approximation Eigen uses
// (generic_fast_erf_float), within a few ulp of std::erf, written so that the compiler vectorises the loops.
// (Comparisons, not std::fmin/fmax, whose NaN rules keep GCC from vectorising.)
inline float clamp(float x, float low, float high) { return x < low ? low : (x > high ? high : x); }

inline float fast_erf(float x) {
  x = clamp(x, -4.f, 4.f);
  const float x2 = x * x;
  float p = -2.72614225801306e-10f;
  p = p * x2 + 2.77068142495902e-08f;
  p = p * x2 + -2.10102402082508e-06f;
  p = p * x2 + -5.69250639462346e-05f;
  p = p * x2 + -7.34990630326855e-04f;
  p = p * x2 + -2.95459980854025e-03f;
  p = p * x2 + -1.60960333262415e-02f;
  p = p * x;
  float q = -1.45660718464996e-05f;
  q = q * x2 + -2.13374055278905e-04f;
  q = q * x2 + -1.68282697438203e-03f;
  q = q * x2 + -7.37332916720468e-03f;
  q = q * x2 + -1.42647390514189e-02f;
  return p / q;
}

// exp for float on x <= 0 (what GELU's derivative and a softmax need): 2^n * e^r with |r| <= ln2/2, e^r by a
// degree-6 polynomial (Cephes expf's coefficients), 2^n put into the exponent bits; 0 below -87, where float's
// exp underflows.
inline float fast_exp(float x) {
  const float clamped = clamp(x, -87.f, 0.f);
  const float n = std::floor(clamped * 1.44269504088896341f + 0.5f);
  const float r = clamped - n * 0.693359375f - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return x < -87.f ? 0.f : p * scale;
}

constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;

// Reductions over a row in 16 lanes, added up at the end. A single running float sum fixes the order of its
// additions, and GCC keeps such a loop scalar (without -ffast-math); lanes it vectorises, 3-4x faster. term(j) is
// the j-th element (it may also store something).
constexpr int64_t kLanes = 16;

template <typename Term>
inline float lane_sum(int64_t n, Term term) {
  float lanes[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int64_t l = 0; l < kLanes; ++l) lanes[l] += term(j + l);
  }
  float total = 0.f;
  for (; j < n; ++j) total += term(j);
  for (const float lane : lanes) total += lane;
  return total;
}

// kLanes floats as one value (GCC's vector extension), compiled to the target's vector instructions. A maximum written
// as `v > top ? v : top` over a float array stays scalar in GCC (without -ffinite-math-only it will not turn the
// select into a vector max): 1.0 ns an element, against 0.27 on these.
typedef float Lanes __attribute__((vector_size(kLanes * sizeof(float))));

inline Lanes load_lanes(const float* from) {
  Lanes v;
  std::memcpy(&v, from, sizeof v);
  return v;
}

inline void store_lanes(float* to, const Lanes& v) { std::memcpy(to, &v, sizeof v); }

// out = a + b over n elements, returning their maximum (exact: the same in any order)
inline float add_and_max(const float* a, const float* b, float* out, int64_t n) {
  Lanes tops = Lanes{} - INFINITY;
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    const Lanes v = load_lanes(a + j) + load_lanes(b + j);
    store_lanes(out + j, v);
    tops = v > tops ? v : tops;
  }
  float top = -INFINITY;
  for (; j < n; ++j) {
    const float v = out[j] = a[j] + b[j];
    top = v > top ? v : top;
  }
  for (int64_t l = 0; l < kLanes; ++l) top = tops[l] > top ? tops[l] : top;
  return top;
}

// layer_norm(a + b) * w + c of one row (b: null for layer_norm(a) alone) into o; its mean and 1/std into mean, inv.
inline void norm_row(const float* a, const float* b, const float* w, const float* c, float epsilon, int64_t width,
                     float* o, float* mean, float* inv) {
  const float sum = lane_sum(width, [&](int64_t j) { return o[j] = b ? a[j] + b[j] : a[j]; });
  const float mu = sum / width;
  const float squares = lane_sum(width, [&](int64_t j) { return (o[j] - mu) * (o[j] - mu); });
  const float scale = 1.f / std::sqrt(squares / width + epsilon);
  for (int64_t j = 0; j < width; ++j) o[j] = (o[j] - mu) * scale * w[j] + c[j];
  *mean = mu;
  *inv = scale;
}

// The gradient of a + b for one row of norm_row (b: null as there) into gx; the row's share of the weight's and
// the bias's gradients added to weight_acc and bias_acc; normalised: scratch of the row's width.
inline void norm_row_backward(const float* a, const float* b, const float* w, float mu, float inv, const float* g,
                              int64_t width, float* gx, double* weight_acc, double* bias_acc, float* normalised) {
  for (int64_t j = 0; j < width; ++j) {
    normalised[j] = ((b ? a[j] + b[j] : a[j]) - mu) * inv;
    weight_acc[j] += g[j] * normalised[j];
    bias_acc[j] += g[j];
  }
  const float mean_g = lane_sum(width, [&](int64_t j) { return g[j] * w[j]; }) / width;  // mean of dy*w
  const float mean_gx = lane_sum(width, [&](int64_t j) { return g[j] * w[j] * normalised[j]; }) / width;  // *x_hat
  for (int64_t j = 0; j < width; ++j) gx[j] = inv * (g[j] * w[j] - mean_g - normalised[j] * mean_gx);
}

}  // namespace

namespace {

// out = layer_norm(x + residual) * weight + bias over the last axis (residual: null for layer_norm(x)); also the
// rows' mean and 1/std, which the backward reads instead of recomputing them.
// checks a norm's inputs (residual: null where there is none)
void check_norm_inputs(const paddle::Tensor& x, const paddle::Tensor* residual, const paddle::Tensor& weight,
                       const paddle::Tensor& bias) {
  for (auto [t, name] : {std::pair{&x, "x"}, {&weight, "weight"}, {&bias, "bias"}}) check_float32_cpu(*t, name);
  if (residual) {
    check_float32_cpu(*residual, "residual");
    PD_CHECK(x.shape() == residual->shape(), "x and residual differ in shape");
  }
  const int64_t width = x.shape().back();
  PD_CHECK(weight.numel() == width && bias.numel() == width, "weight and bias must match the last axis");
}

std::vector<paddle::Tensor> norm_forward(const paddle::Tensor& x, const paddle::Tensor* residual,
                                         const paddle::Tensor& weight, const paddle::Tensor& bias, float epsilon) {
  check_norm_inputs(x, residual, weight, bias);
  const int64_t width = x.shape().back(), rows = x.numel() / width;
  auto out = paddle::empty(x.shape(), paddle::DataType::FLOAT32, paddle::CPUPlace());
  auto mean = paddle::empty({rows}, paddle::DataType::FLOAT32, paddle::CPUPlace());
  auto inv_std = paddle::empty({rows}, paddle::DataType::FLOAT32, paddle::CPUPlace());
  const float *a = x.data<float>(), *b = residual ? residual->data<float>() : nullptr;
  const float *w = weight.data<float>(), *c = bias.data<float>();
  float *o = out.data<float>(), *m = mean.data<float>(), *s = inv_std.data<float>();
  for_rows(rows, width, [&](int64_t r) {
    norm_row(a + r * width, b ? b + r * width : nullptr, w, c, epsilon, width, o + r * width, m + r, s + r);
  });
  return {out, mean, inv_std};
}

// The gradients of x (of x + residual), weight and bias.
std::vector<paddle::Tensor> norm_backward(const paddle::Tensor& x, const paddle::Tensor* residual,
                                          const paddle::Tensor& weight, const paddle::Tensor& mean,
                                          const paddle::Tensor& inv_std, const paddle::Tensor& grad_out) {
  check_float32_cpu(grad_out, "grad_out");
  const int64_t width = x.shape().back(), rows = x.numel() / width;
  auto grad_x = paddle::empty(x.shape(), paddle::DataType::FLOAT32, paddle::CPUPlace());
  auto grad_weight = paddle::empty(weight.shape(), paddle::DataType::FLOAT32, paddle::CPUPlace());
  auto grad_bias = paddle::empty(weight.shape(), paddle::DataType::FLOAT32, paddle::CPUPlace());
  const float *a = x.data<float>(), *b = residual ? residual->data<float>() : nullptr, *w = weight.data<float>();
  const float *m = mean.data<float>(), *s = inv_std.data<float>(), *g = grad_out.data<float>();
  float* gx = grad_x.data<float>();
  // the weight's and bias's gradients are sums over every row (for_rows_summing)
  std::vector<float> scratch(width * team_size(rows * width));
  const auto sums = for_rows_summing<double>(rows, width, 2 * width, [&](int64_t r, double* weight_acc, int t) {
    const int64_t at = r * width;
    norm_row_backward(a + at, b ? b + at : nullptr, w, m[r], s[r], g + at, width, gx + at, weight_acc,
                      weight_acc + width, scratch.data() + width * t);
  });
  float *gw = grad_weight.data<float>(), *gb = grad_bias.data<float>();
  for (int64_t j = 0; j < width; ++j) {
    gw[j] = static_cast<float>(sums[j]);
    gb[j] = static_cast<float>(sums[width + j]);
  }
  return {grad_x, grad_weight, grad_bias};
}

std::vector<std::vector<int64_t>> norm_shapes(const std::vector<int64_t>& x) {
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < x.size(); ++i) rows *= x[i];
  return {x, {rows}, {rows}};
}

std::vector<paddle::DataType> norm_dtypes(const paddle::DataType& x) {
  return {x, paddle::DataType::FLOAT32, paddle::DataType::FLOAT32};
}

}  // namespace

// layer_norm(x + residual), the encoder layers' post-norm residual step
std::vector<paddle::Tensor> AddLayerNormForward(const paddle::Tensor& x, const paddle::Tensor& residual,
                                                const paddle::Tensor& weight, const paddle::Tensor& bias,
                                                float epsilon) {
  return norm_forward(x, &residual, weight, bias, epsilon);
}

// The gradients of x and residual (equal: both enter as one sum; two tensors all the same, as Paddle may add
// into either in place), weight and bias.
std::vector<paddle::Tensor> AddLayerNormBackward(const paddle::Tensor& x, const paddle::Tensor& residual,
                                                 const paddle::Tensor& weight, const paddle::Tensor& mean,
                                                 const paddle::Tensor& inv_std, const paddle::Tensor& grad_out) {
  auto grads = norm_backward(x, &residual, weight, mean, inv_std, grad_out);
  auto grad_residual = paddle::empty(x.shape(), paddle::DataType::FLOAT32, paddle::CPUPlace());
  const float* from = grads[0].data<float>();
  float* to = grad_residual.data<float>();
  for_blocks(x.numel(), [&](int64_t begin, int64_t end) {
    std::memcpy(to + begin, from + begin, (end - begin) * sizeof(float));
  });
  return {grads[0], grad_residual, grads[1], grads[2]};
}

std::vector<std::vector<int64_t>> AddLayerNormShape(const std::vector<int64_t>& x, const std::vector<int64_t>&,
                                                    const std::vector<int64_t>&, const std::vector<int64_t>&) {
  return norm_shapes(x);
}

std::vector<paddle::DataType> AddLayerNormDtype(const paddle::DataType& x, const paddle::DataType&,
                                                const paddle::DataType&, const paddle::DataType&) {
  return norm_dtypes(x);
}

PD_BUILD_OP(paddle_ft_add_layer_norm)
    .Inputs({"X", "Residual", "Weight", "Bias"})
    .Outputs({"Out", "Mean", "InvStd"})
    .Attrs({"epsilon: float"})
    .SetKernelFn(PD_KERNEL(AddLayerNormForward))
    .SetInferShapeFn(PD_INFER_SHAPE(AddLayerNormShape))
    .SetInferDtypeFn(PD_INFER_DTYPE(AddLayerNormDtype));

PD_BUILD_GRAD_OP(paddle_ft_add_layer_norm)
    .Inputs({"X", "Residual", "Weight", "Mean", "InvStd", paddle::Grad("Out")})
    .Outputs({paddle::Grad("X"), paddle::Grad("Residual"), paddle::Grad("Weight"), paddle::Grad("Bias")})
    .SetKernelFn(PD_KERNEL(AddLayerNormBackward));

// layer_norm(x) alone: the embeddings' norm (Paddle's CPU backward of it takes ~5 ms a step of the bench model)
std::vector<paddle::Tensor> LayerNormForward(const paddle::Tensor& x, const paddle::Tensor& weight,
                                             const paddle::Tensor& bias, float epsilon) {
  return norm_forward(x, nullptr, weight, bias, epsilon);
}

std::vector<paddle::Tensor> LayerNormBackward(const paddle::Tensor& x, const paddle::Tensor& weight,
                                              const paddle::Tensor& mean, const paddle::Tensor& inv_std,
                                              const paddle::Tensor& grad_out) {
  return norm_backward(x, nullptr, weight, mean, inv_std, grad_out);
}

std::vector<std::vector<int64_t>> LayerNormShape(const std::vector<int64_t>& x, const std::vector<int64_t>&,
                                                 const std::vector<int64_t>&) {
  return norm_shapes(x);
}

std::vector<paddle::DataType> LayerNormDtype(const paddle::DataType& x, const paddle::DataType&,
                                             const paddle::DataType&) {
  return norm_dtypes(x);
}

PD_BUILD_OP(paddle_ft_layer_norm)
    .Inputs({"X", "Weight", "Bias"})
    .Outputs({"Out", "Mean", "InvStd"})
    .Attrs({"epsilon: float"})
    .SetKernelFn(PD_KERNEL(LayerNormForward))
    .SetInferShapeFn(PD_INFER_SHAPE(LayerNormShape))
    .SetInferDtypeFn(PD_INFER_DTYPE(LayerNormDtype));

PD_BUILD_GRAD_OP(paddle_ft_layer_norm)
    .Inputs({"X", "Weight", "Mean", "InvStd", paddle::Grad("Out")})
    .Outputs({paddle::Grad("X"), paddle::Grad("Weight"), paddle::Grad("Bias")})
    .SetKernelFn(PD_KERNEL(LayerNormBackward));

namespace {

// Exact GELU: x * (1 + erf(x / sqrt 2)) / 2
inline float gelu(float x) { return 0.5f * x * (1.f + fast_erf(x * kInvSqrt2)); }

// d gelu / dx = (1 + erf(x / sqrt 2)) / 2 + x * exp(-x^2 / 2) / sqrt(2 pi)
inline float gelu_derivative(float x) {
  return 0.5f * (1.f + fast_erf(x * kInvSqrt2)) + x * kInvSqrt2Pi * fast_exp(-0.5f * x * x);
}

}  // namespace

std::vector<paddle::Tensor> GeluForward(const paddle::Tensor& x) {
  check_float32_cpu(x, "x");
  auto out = paddle::empty(x.shape(), paddle::DataType::FLOAT32, paddle::CPUPlace());
  const float* a = x.data<float>();
  float* o = out.data<float>();
  for_blocks(x.numel(), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) o[i] = gelu(a[i]);
  });
  return {out};
}

std::vector<paddle::Tensor> GeluBackward(const paddle::Tensor& x, const paddle::Tensor& grad_out) {
  check_float32_cpu(grad_out, "grad_out");
  auto grad_x = paddle::empty(x.shape(), paddle::DataType::FLOAT32, paddle::CPUPlace());
  const float *a = x.data<float>(), *g = grad_out.data<float>();
  float* gx = grad_x.data<float>();
  for_blocks(x.numel(), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) gx[i] = g[i] * gelu_derivative(a[i]);
  });
  return {grad_x};
}

PD_BUILD_OP(paddle_ft_gelu)
    .Inputs({"X"})
    .Outputs({"Out"})
    .SetKernelFn(PD_KERNEL(GeluForward));

PD_BUILD_GRAD_OP(paddle_ft_gelu)
    .Inputs({"X", paddle::Grad("Out")})
    .Outputs({paddle::Grad("X")})
    .SetKernelFn(PD_KERNEL(GeluBackward));

// gelu(x + bias), x [..., width]: the FFN's first linear's bias added inside GELU (the matmul's output read once,
// not once by the bias and again by GELU), and in the backward the bias's gradient, the column sums of d(x + bias),
// summed while they are written (not read again by a matmul with a row of ones).
std::vector<paddle::Tensor> BiasGeluForward(const paddle::Tensor& x, const paddle::Tensor& bias) {
  check_float32_cpu(x, "x");
  check_float32_cpu(bias, "bias");
  const int64_t width = bias.numel(), rows = x.numel() / width;
  PD_CHECK(x.shape().back() == width, "x's last axis must be the bias's length");
  auto out = paddle::empty(x.shape(), paddle::DataType::FLOAT32, paddle::CPUPlace());
  const float *a = x.data<float>(), *b = bias.data<float>();
  float* o = out.data<float>();
  for_rows(rows, width, [&](int64_t r) {
    const float* in = a + r * width;
    float* row = o + r * width;
    for (int64_t j = 0; j < width; ++j) row[j] = gelu(in[j] + b[j]);
  });
  return {out};
}

std::vector<paddle::Tensor> BiasGeluBackward(const paddle::Tensor& x, const paddle::Tensor& bias,
                                             const paddle::Tensor& grad_out) {
  check_float32_cpu(grad_out, "grad_out");
  const int64_t width = bias.numel(), rows = x.numel() / width;
  auto grad_x = paddle::empty(x.shape(), paddle::DataType::FLOAT32, paddle::CPUPlace());
  auto grad_bias = paddle::empty(bias.shape(), paddle::DataType::FLOAT32, paddle::CPUPlace());
  const float *a = x.data<float>(), *b = bias.data<float>(), *g = grad_out.data<float>();
  float *gx = grad_x.data<float>(), *gb = grad_bias.data<float>();
  const auto sums = for_rows_summing<float>(rows, width, width, [&](int64_t r, float* bias_acc, int) {
    const float *in = a + r * width, *up = g + r * width;
    float* row = gx + r * width;
    for (int64_t j = 0; j < width; ++j) {
      const float d = up[j] * gelu_derivative(in[j] + b[j]);
      row[j] = d;
      bias_acc[j] += d;
    }
  });
  std::copy(sums.begin(), sums.end(), gb);
  return {grad_x, grad_bias};
}

PD_BUILD_OP(paddle_ft_bias_gelu)
    .Inputs({"X", "Bias"})
    .Outputs({"Out"})
    .SetKernelFn(PD_KERNEL(BiasGeluForward));

PD_BUILD_GRAD_OP(paddle_ft_bias_gelu)
    .Inputs({"X", "Bias", paddle::Grad("Out")})
    .Outputs({paddle::Grad("X"), paddle::Grad("Bias")})
    .SetKernelFn(PD_KERNEL(BiasGeluBackward));

namespace {

// out = softmax(scores + mask) over one row of `keys` (out may be scores)
inline void masked_softmax_row(const float* scores, const float* mask, float* out, int64_t keys) {
  const float top = add_and_max(scores, mask, out, keys);
  const float inv = 1.f / lane_sum(keys, [&](int64_t j) { return out[j] = fast_exp(out[j] - top); });
  for (int64_t j = 0; j < keys; ++j) out[j] *= inv;
}

// a softmax's backward over one row: d scores = y * (dy - sum(dy * y)) (grad_scores may be grad_out)
inline void softmax_grad_row(const float* y, const float* grad_out, float* grad_scores, int64_t keys) {
  const float dot = lane_sum(keys, [&](int64_t j) { return grad_out[j] * y[j]; });
  for (int64_t j = 0; j < keys; ++j) grad_scores[j] = y[j] * (grad_out[j] - dot);
}

}  // namespace

// softmax(scores + mask) over the last axis, for attention: scores [batch, heads, queries, keys], mask [batch, 1, 1,
// keys] (PaddleNLP's padding mask, added to every head and query of its text).
std::vector<paddle::Tensor> MaskedSoftmaxForward(const paddle::Tensor& scores, const paddle::Tensor& mask) {
  check_float32_cpu(scores, "scores");
  check_float32_cpu(mask, "mask");
  const auto& shape = scores.shape();
  PD_CHECK(shape.size() == 4, "scores must be [batch, heads, queries, keys]");
  const int64_t keys = shape[3], rows_per_text = shape[1] * shape[2], rows = scores.numel() / keys;
  PD_CHECK(mask.numel() == shape[0] * keys, "mask must be [batch, 1, 1, keys]");
  auto out = paddle::empty(shape, paddle::DataType::FLOAT32, paddle::CPUPlace());
  const float *a = scores.data<float>(), *m = mask.data<float>();
  float* o = out.data<float>();
  for_rows(rows, keys, [&](int64_t r) {
    masked_softmax_row(a + r * keys, m + (r / rows_per_text) * keys, o + r * keys, keys);
  });
  return {out};
}

// d scores = y * (dy - sum(dy * y)) per row; the mask is a constant (no gradient).
std::vector<paddle::Tensor> MaskedSoftmaxBackward(const paddle::Tensor& out, const paddle::Tensor& grad_out) {
  check_float32_cpu(grad_out, "grad_out");
  const int64_t keys = out.shape().back(), rows = out.numel() / keys;
  auto grad_scores = paddle::empty(out.shape(), paddle::DataType::FLOAT32, paddle::CPUPlace());
  const float *y = out.data<float>(), *g = grad_out.data<float>();
  float* gs = grad_scores.data<float>();
  for_rows(rows, keys, [&](int64_t r) { softmax_grad_row(y + r * keys, g + r * keys, gs + r * keys, keys); });
  return {grad_scores};
}

PD_BUILD_OP(paddle_ft_masked_softmax)
    .Inputs({"Scores", "Mask"})
    .Outputs({"Out"})
    .SetKernelFn(PD_KERNEL(MaskedSoftmaxForward));

PD_BUILD_GRAD_OP(paddle_ft_masked_softmax)
    .Inputs({"Out", paddle::Grad("Out")})
    .Outputs({paddle::Grad("Scores")})
    .SetKernelFn(PD_KERNEL(MaskedSoftmaxBackward));

namespace {

// Paddle's CPU generator is a std::mt19937_64 (libstdc++'s). This copy of it produces a block of 312 draws with
// loops the compiler vectorises (std's engine tempers one draw per call, behind a branch): the same numbers in the
// same order. It takes the engine's state through the engine's own text form (312 words, then the position in the
// block) and hands the advanced state back the same way (tens of microseconds a call).
class Mt19937_64 {
 public:
  static constexpr int kWords = 312, kShift = 156;

  explicit Mt19937_64(const std::mt19937_64& engine) {
    std::ostringstream text;
    text << engine;
    std::istringstream numbers(text.str());
    for (uint64_t& word : words_) numbers >> word;
    numbers >> position_;
    PD_CHECK(!numbers.fail() && position_ <= kWords, "unexpected text state of the CPU generator");
  }

  // the next n draws, tempered, into out
  void draw(uint64_t* out, int64_t n) {
    while (n > 0) {
      if (position_ == kWords) twist();
      const int64_t take = std::min<int64_t>(n, kWords - static_cast<int64_t>(position_));
      const uint64_t* from = words_ + position_;
      for (int64_t i = 0; i < take; ++i) out[i] = temper(from[i]);
      position_ += take;
      out += take;
      n -= take;
    }
  }

  void store(std::mt19937_64* engine) const {
    std::ostringstream text;
    for (const uint64_t word : words_) text << word << ' ';
    text << position_;
    std::istringstream(text.str()) >> *engine;
  }

 private:
  static uint64_t temper(uint64_t z) {
    z ^= (z >> 29) & 0x5555555555555555ULL;
    z ^= (z << 17) & 0x71d67fffeda60000ULL;
    z ^= (z << 37) & 0xfff7eee000000000ULL;
    return z ^ (z >> 43);
  }

  static uint64_t mix(uint64_t upper_from, uint64_t lower_from, uint64_t shifted) {
    const uint64_t y = (upper_from & 0xffffffff80000000ULL) | (lower_from & 0x7fffffffULL);
    return shifted ^ (y >> 1) ^ ((y & 1) * 0xb5026f5aa96619e9ULL);
  }

  // libstdc++'s _M_gen_rand, in three loops as there
  void twist() {
    uint64_t* x = words_;
    for (int k = 0; k < kWords - kShift; ++k) x[k] = mix(x[k], x[k + 1], x[k + kShift]);
    for (int k = kWords - kShift; k < kWords - 1; ++k) x[k] = mix(x[k], x[k + 1], x[k - (kWords - kShift)]);
    x[kWords - 1] = mix(x[kWords - 1], x[0], x[kShift - 1]);
    position_ = 0;
  }

  uint64_t words_[kWords];
  uint64_t position_ = kWords;
};

// std::uniform_real_distribution<float>(0, 1) over a 64-bit engine, as libstdc++ computes it (generate_canonical:
// the draw converted to float, divided by 2^64, and 1 taken back to the float below it)
float canonical(uint64_t draw) {
  const float value = static_cast<float>(draw) / 18446744073709551616.f;
  return value >= 1.f ? std::nextafter(1.f, 0.f) : value;
}

// The smallest draw that keeps its element (canonical(draw) < p is false): canonical never decreases as the draw
// grows, so the dropped draws are exactly those below it. p < 1 in float, so the largest draw keeps its element.
uint64_t keep_threshold(float p) {
  uint64_t low = 0, high = ~0ULL;  // the answer lies in [low, high]
  while (low < high) {
    const uint64_t middle = low + (high - low) / 2;
    if (canonical(middle) < p) low = middle + 1; else high = middle;
  }
  return low;
}

// Paddle's dropout masks: one std::uniform_real_distribution<float>(0, 1) draw per element from Paddle's CPU
// generator, in order, an element kept (1) where its draw is not below p; the generator left where Paddle's dropout
// leaves it. The draws are compared with the threshold draw instead of converted one by one, in blocks through
// vectorised loops. MaskDrawer draws them in units (a tile, a block) and tells how many units are drawn.
class MaskDrawer {
 public:
  // the masks of n elements, in units of unit_size (the last one may be shorter)
  MaskDrawer(uint8_t* keep, int64_t n, int64_t unit_size, float p)
      : paddle_engine_(phi::DefaultCPUGenerator()->GetCPUEngine()), engine_(*paddle_engine_), keep_(keep), n_(n),
        unit_size_(unit_size), threshold_(keep_threshold(p)) {}

  int64_t units() const { return (n_ + unit_size_ - 1) / unit_size_; }

  // draws every unit in order, counting each for wait_for, then leaves Paddle's generator after the last draw
  void draw() {
    constexpr int64_t kBlock = 1024;
    uint64_t draws[kBlock];
    const uint64_t threshold = threshold_;  // locals: a store through uint8_t* could alias the members, which would
    const int64_t unit_size = unit_size_, n = n_;  // be read again at every element, and the loop not vectorised
    for (int64_t u = 0; u < units(); ++u) {
      const int64_t end = std::min(n, (u + 1) * unit_size);
      for (int64_t start = u * unit_size; start < end; start += kBlock) {
        const int64_t count = std::min(kBlock, end - start);
        engine_.draw(draws, count);
        uint8_t* kb = keep_ + start;
        for (int64_t i = 0; i < count; ++i) kb[i] = draws[i] >= threshold;
      }
      drawn_.store(u + 1, std::memory_order_release);
    }
    engine_.store(paddle_engine_.get());
  }

  // returns once unit u's mask is drawn
  void wait_for(int64_t u) const {
    while (drawn_.load(std::memory_order_acquire) <= u) {
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
    }
  }

 private:
  std::shared_ptr<std::mt19937_64> paddle_engine_;
  Mt19937_64 engine_;
  uint8_t* keep_;
  const int64_t n_, unit_size_;
  const uint64_t threshold_;
  std::atomic<int64_t> drawn_{0};
};

// Work over the units of n elements (unit_size each, the last one may be shorter) that each need their dropout mask
// part-way (p > 0), with the masks drawn while the work runs: the draws are one stream, so one thread (the team's
// first) draws them, unit after unit, and then joins the others, which meanwhile take units in turn; before(u,
// scratch) runs for a unit before its mask is needed, after(u, scratch) once it is drawn (scratch: scratch_size
// floats of the thread's own). Each unit is computed the same whichever thread takes it. (Units are taken from an
// atomic counter: Intel OpenMP's dynamic schedule kept the other threads waiting until the drawing thread came.)
template <typename Before, typename After>
void with_masks_drawn_alongside(uint8_t* keep, int64_t n, int64_t unit_size, float p, int64_t scratch_size,
                                int threads, Before before, After after) {
  MaskDrawer drawer(keep, n, unit_size, p);
  const int64_t units = drawer.units();
  std::atomic<int64_t> next_unit{0};
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    std::vector<float> scratch(scratch_size);
    if (thread_index() == 0) drawer.draw();
    for (int64_t u = next_unit++; u < units; u = next_unit++) {
      before(u, scratch.data());
      drawer.wait_for(u);
      after(u, scratch.data());
    }
  }
}

// x's kept elements divided by keep_share, the others 0 (dropout's forward, and its backward on the gradient):
// read and divided whatever the mask, since GCC leaves a loop with a conditional load scalar (2x slower)
inline void apply_keep_mask(const float* x, const uint8_t* keep, float keep_share, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float kept = x[i] / keep_share;
    out[i] = keep[i] ? kept : 0.f;
  }
}

}  // namespace

// Paddle's CPU dropout (upscale_in_train) with the masks Paddle's would draw (MaskDrawer), the kept elements
// divided by 1 - p: over ten times as fast as Paddle's kernel, for the same numbers.
std::vector<paddle::Tensor> DropoutForward(const paddle::Tensor& x, float p) {
  check_float32_cpu(x, "x");
  PD_CHECK(p > 0.f && p < 1.f, "p must lie between 0 and 1 (in float32)");
  auto out = paddle::empty(x.shape(), paddle::DataType::FLOAT32, paddle::CPUPlace());
  auto mask = paddle::empty(x.shape(), paddle::DataType::UINT8, paddle::CPUPlace());
  const float* a = x.data<float>();
  float* o = out.data<float>();
  uint8_t* m = mask.data<uint8_t>();
  // in blocks, each applied by the other threads as soon as it is drawn
  constexpr int64_t kBlock = 1 << 14;
  const int64_t n = x.numel();
  auto nothing_before = [](int64_t, float*) {};
  auto apply = [&](int64_t b, float*) {
    const int64_t begin = b * kBlock;
    apply_keep_mask(a + begin, m + begin, 1.f - p, o + begin, std::min(kBlock, n - begin));
  };
  with_masks_drawn_alongside(m, n, kBlock, p, 0, team_size(n), nothing_before, apply);
  return {out, mask};
}

std::vector<paddle::Tensor> DropoutBackward(const paddle::Tensor& mask, const paddle::Tensor& grad_out, float p) {
  check_float32_cpu(grad_out, "grad_out");
  auto grad_x = paddle::empty(grad_out.shape(), paddle::DataType::FLOAT32, paddle::CPUPlace());
  const uint8_t* m = mask.data<uint8_t>();
  const float* g = grad_out.data<float>();
  float* gx = grad_x.data<float>();
  for_blocks(grad_out.numel(), [&](int64_t begin, int64_t end) {
    apply_keep_mask(g + begin, m + begin, 1.f - p, gx + begin, end - begin);
  });
  return {grad_x};
}

std::vector<std::vector<int64_t>> DropoutShape(const std::vector<int64_t>& x) { return {x, x}; }

std::vector<paddle::DataType> DropoutDtype(const paddle::DataType& x) {
  return {x, paddle::DataType::UINT8};
}

PD_BUILD_OP(paddle_ft_dropout)
    .Inputs({"X"})
    .Outputs({"Out", "Mask"})
    .Attrs({"p: float"})
    .SetKernelFn(PD_KERNEL(DropoutForward))
    .SetInferShapeFn(PD_INFER_SHAPE(DropoutShape))
    .SetInferDtypeFn(PD_INFER_DTYPE(DropoutDtype));

PD_BUILD_GRAD_OP(paddle_ft_dropout)
    .Inputs({"Mask", paddle::Grad("Out")})
    .Outputs({paddle::Grad("X")})
    .Attrs({"p: float"})
    .SetKernelFn(PD_KERNEL(DropoutBackward));

// layer_norm(dropout(x, p) + residual): the encoder layers' residual step after attention and after the FFN, with
// dropout's masks (Paddle's, as the dropout kernel draws them) drawn while the other threads take the rows whose
// masks are drawn, each row dropped out, added and normalised in one go; the sum kept for the backward instead of
// the dropped-out x. Two passes over memory fewer than dropout then add_layer_norm, and the norm's work done while
// the masks are drawn.
std::vector<paddle::Tensor> DropoutAddLayerNormForward(const paddle::Tensor& x, const paddle::Tensor& residual,
                                                       const paddle::Tensor& weight, const paddle::Tensor& bias,
                                                       float epsilon, float p) {
  check_norm_inputs(x, &residual, weight, bias);
  PD_CHECK(p > 0.f && p < 1.f, "p must lie between 0 and 1 (in float32)");
  const int64_t width = x.shape().back(), n = x.numel(), rows = n / width;
  auto out = paddle::empty(x.shape(), paddle::DataType::FLOAT32, paddle::CPUPlace());
  auto sum = paddle::empty(x.shape(), paddle::DataType::FLOAT32, paddle::CPUPlace());
  auto mean = paddle::empty({rows}, paddle::DataType::FLOAT32, paddle::CPUPlace());
  auto inv_std = paddle::empty({rows}, paddle::DataType::FLOAT32, paddle::CPUPlace());
  auto keep = paddle::empty(x.shape(), paddle::DataType::UINT8, paddle::CPUPlace());
  const float *a = x.data<float>(), *b = residual.data<float>(), *w = weight.data<float>(), *c = bias.data<float>();
  float *o = out.data<float>(), *z = sum.data<float>(), *m = mean.data<float>(), *s = inv_std.data<float>();
  uint8_t* k = keep.data<uint8_t>();
  const int64_t unit_rows = std::max<int64_t>(1, (1 << 14) / width);  // rows of about 2^14 elements a unit
  auto nothing_before = [](int64_t, float*) {};
  auto rows_of_unit = [&](int64_t u, float*) {
    for (int64_t r = u * unit_rows; r < std::min(rows, (u + 1) * unit_rows); ++r) {
      const int64_t at = r * width;
      apply_keep_mask(a + at, k + at, 1.f - p, z + at, width);  // dropout(x), then + residual: the same roundings
      for (int64_t j = 0; j < width; ++j) z[at + j] += b[at + j];
      norm_row(z + at, nullptr, w, c, epsilon, width, o + at, m + r, s + r);
    }
  };
  with_masks_drawn_alongside(k, n, unit_rows * width, p, 0, team_size(n), nothing_before, rows_of_unit);
  return {out, mean, inv_std, keep, sum};
}

// The gradients of x (the sum's, through dropout's mask), residual (the sum's itself), weight and bias.
std::vector<paddle::Tensor> DropoutAddLayerNormBackward(const paddle::Tensor& sum, const paddle::Tensor& weight,
                                                        const paddle::Tensor& mean, const paddle::Tensor& inv_std,
                                                        const paddle::Tensor& keep, const paddle::Tensor& grad_out,
                                                        float p) {
  auto grads = norm_backward(sum, nullptr, weight, mean, inv_std, grad_out);
  auto grad_x = paddle::empty(sum.shape(), paddle::DataType::FLOAT32, paddle::CPUPlace());
  const float* g = grads[0].data<float>();
  const uint8_t* k = keep.data<uint8_t>();
  float* gx = grad_x.data<float>();
  for_blocks(sum.numel(), [&](int64_t begin, int64_t end) {
    apply_keep_mask(g + begin, k + begin, 1.f - p, gx + begin, end - begin);
  });
  return {grad_x, grads[0], grads[1], grads[2]};
}

std::vector<std::vector<int64_t>> DropoutAddLayerNormShape(const std::vector<int64_t>& x,
                                                           const std::vector<int64_t>&,
                                                           const std::vector<int64_t>&,
                                                           const std::vector<int64_t>&) {
  auto shapes = norm_shapes(x);
  return {shapes[0], shapes[1], shapes[2], x, x};
}

std::vector<paddle::DataType> DropoutAddLayerNormDtype(const paddle::DataType& x, const paddle::DataType&,
                                                       const paddle::DataType&, const paddle::DataType&) {
  return {x, paddle::DataType::FLOAT32, paddle::DataType::FLOAT32, paddle::DataType::UINT8, x};
}

PD_BUILD_OP(paddle_ft_dropout_add_layer_norm)
    .Inputs({"X", "Residual", "Weight", "Bias"})
    .Outputs({"Out", "Mean", "InvStd", "Keep", "Sum"})
    .Attrs({"epsilon: float", "p: float"})
    .SetKernelFn(PD_KERNEL(DropoutAddLayerNormForward))
    .SetInferShapeFn(PD_INFER_SHAPE(DropoutAddLayerNormShape))
    .SetInferDtypeFn(PD_INFER_DTYPE(DropoutAddLayerNormDtype));

PD_BUILD_GRAD_OP(paddle_ft_dropout_add_layer_norm)
    .Inputs({"Sum", "Weight", "Mean", "InvStd", "Keep", paddle::Grad("Out")})
    .Outputs({paddle::Grad("X"), paddle::Grad("Residual"), paddle::Grad("Weight"), paddle::Grad("Bias")})
    .Attrs({"p: float"})
    .SetKernelFn(PD_KERNEL(DropoutAddLayerNormBackward));

// A linear layer's bias added to its matmul's output in place, [rows, width] += bias, the rows split between the
// threads. Paddle's addmm broadcasts the bias into the output on one thread first (Eigen), 3.6% of a training step
// at e5-small's shape.
void AddBias(paddle::Tensor& x, const paddle::Tensor& bias) {
  check_float32_cpu(x, "x");
  check_float32_cpu(bias, "bias");
  const int64_t width = bias.numel(), rows = x.numel() / width;
  PD_CHECK(x.shape().back() == width, "x's last axis must be the bias's length");
  float* o = x.data<float>();
  const float* b = bias.data<float>();
  for_rows(rows, width, [&](int64_t r) {
    float* row = o + r * width;
    for (int64_t j = 0; j < width; ++j) row[j] += b[j];
  });
}

PD_BUILD_OP(paddle_ft_add_bias)
    .Inputs({"X", "Bias"})
    .Outputs({"Out"})
    .SetInplaceMap({{"X", "Out"}})
    .SetKernelFn(PD_KERNEL(AddBias));

// Attention's core in one kernel, for self-attention over the projections as the linear layers leave them
// ([batch, length, heads x head_dim], no transposes): per text and head, scores = scale * q k^T, probabilities =
// softmax(scores + mask), dropout on them (Paddle's masks, drawn in [batch, heads, queries, keys] order as the
// composition's dropout draws them), context = probabilities v, written back in the same [batch, length, heads x
// head_dim] layout. Each (text, head) tile fits in the core's cache and runs on one thread with MKL's sgemm (the
// library Paddle's own matmuls call), the tiles split between the threads. The composition (two reshapes and
// three transposes in, one out, a scale, two batched matmuls, the softmax and the dropout, and their backwards)
// took 11-12 ms a layer at e5-small's shape, most of it moving [batch, heads, length, length] tensors through memory.
#ifdef PADDLE_FT_MKL
extern "C" void cblas_sgemm(int layout, int trans_a, int trans_b, int m, int n, int k, float alpha, const float* a,
                            int lda, const float* b, int ldb, float beta, float* c, int ldc);

namespace {

constexpr int kRowMajor = 101, kNo = 111, kTransposed = 112;  // CBLAS's enum values

// C (m x n, leading dimension ldc) = alpha * op(A) op(B), row-major, on the calling thread
inline void gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                 int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc) {
  cblas_sgemm(kRowMajor, transpose_a ? kTransposed : kNo, transpose_b ? kTransposed : kNo, static_cast<int>(m),
              static_cast<int>(n), static_cast<int>(k), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb),
              0.f, c, static_cast<int>(ldc));
}

struct AttentionShape {
  int64_t batch, length, heads, head_dim, width;  // width = heads x head_dim, a row of q, k, v and the output

  AttentionShape(const paddle::Tensor& q, int64_t num_heads) {
    const auto& shape = q.shape();
    PD_CHECK(shape.size() == 3, "q, k and v must be [batch, length, heads x head_dim]");
    batch = shape[0], length = shape[1], width = shape[2], heads = num_heads;
    PD_CHECK(heads > 0 && width % heads == 0, "the width of q must divide into the heads");
    head_dim = width / heads;
  }
  int64_t tiles() const { return batch * heads; }
  int64_t tile_size() const { return length * length; }
  // where (text, head) of tile t starts in a [batch, length, width] tensor
  int64_t offset(int64_t t) const { return (t / heads) * length * width + (t % heads) * head_dim; }
};

// body(tile, scratch) for every (text, head) tile, split between the threads; scratch holds two tiles
template <typename Body>
void for_tiles(const AttentionShape& shape, Body body) {
  const int threads = team_size(shape.tiles() * shape.tile_size());
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    std::vector<float> scratch(2 * shape.tile_size());
#pragma omp for schedule(static)
    for (int64_t t = 0; t < shape.tiles(); ++t) body(t, scratch.data());
  }
}

// One (text, head) tile of L tokens, the padded kernel's and the packed one's alike: q, k, v, out and their
// gradients point at the tile's first row (rows W apart, head_dim D wide); y is its [L, L] probabilities; keep its
// dropout mask (read only where p > 0).

// y = softmax(scale q k^T + mask), kept for the backward
inline void tile_probabilities(int64_t L, int64_t D, int64_t W, float scale, const float* q, const float* k,
                               const float* mask_row, float* y) {
  gemm(false, true, L, L, D, scale, q, W, k, W, y, L);
  for (int64_t i = 0; i < L; ++i) masked_softmax_row(y + i * L, mask_row, y + i * L, L);
}

// out = dropout(y) v (scratch: L x L floats)
inline void tile_context(int64_t L, int64_t D, int64_t W, const float* y, const uint8_t* keep, float p,
                         const float* v, float* out, float* scratch) {
  const float* weights = y;
  if (p > 0.f) {
    apply_keep_mask(y, keep, 1.f - p, scratch, L * L);
    weights = scratch;
  }
  gemm(false, false, L, D, L, 1.f, weights, L, v, W, out, W);
}

// the tile's gradients of q, k and v from its output's (scratch: 2 x L x L floats)
inline void tile_backward(int64_t L, int64_t D, int64_t W, float scale, float p, const float* y, const uint8_t* keep,
                          const float* q, const float* k, const float* v, const float* grad_out, float* grad_q,
                          float* grad_k, float* grad_v, float* scratch) {
  float *weights = scratch, *grad = scratch + L * L;
  if (p > 0.f) apply_keep_mask(y, keep, 1.f - p, weights, L * L);
  gemm(true, false, L, D, L, 1.f, p > 0.f ? weights : y, L, grad_out, W, grad_v, W);  // d v = weights^T d out
  gemm(false, true, L, L, D, 1.f, grad_out, W, v, W, grad, L);                         // d weights = d out v^T
  if (p > 0.f) apply_keep_mask(grad, keep, 1.f - p, grad, L * L);
  for (int64_t i = 0; i < L; ++i) softmax_grad_row(y + i * L, grad + i * L, grad + i * L, L);  // d scores
  gemm(false, false, L, D, L, scale, grad, L, k, W, grad_q, W);  // d q = scale d scores k
  gemm(true, false, L, D, L, scale, grad, L, q, W, grad_k, W);   // d k = scale d scores^T q
}

}  // namespace

std::vector<paddle::Tensor> AttentionForward(const paddle::Tensor& q, const paddle::Tensor& k,
                                             const paddle::Tensor& v, const paddle::Tensor& mask, int64_t heads,
                                             float scale, float p) {
  for (const auto* t : {&q, &k, &v, &mask}) check_float32_cpu(*t, "q, k, v and mask");
  const AttentionShape shape(q, heads);
  PD_CHECK(k.shape() == q.shape() && v.shape() == q.shape(), "q, k and v must have the same shape");
  PD_CHECK(mask.numel() == shape.batch * shape.length, "mask must be [batch, 1, 1, length]");
  PD_CHECK(p >= 0.f && p < 1.f, "p must lie in [0, 1) (in float32)");
  const int64_t L = shape.length, W = shape.width, D = shape.head_dim;
  auto out = paddle::empty(q.shape(), paddle::DataType::FLOAT32, paddle::CPUPlace());
  auto probs = paddle::empty({shape.batch, heads, L, L}, paddle::DataType::FLOAT32, paddle::CPUPlace());
  auto keep = paddle::empty({p > 0.f ? shape.tiles() * shape.tile_size() : 0}, paddle::DataType::UINT8,
                            paddle::CPUPlace());
  const float *qd = q.data<float>(), *kd = k.data<float>(), *vd = v.data<float>(), *md = mask.data<float>();
  float *od = out.data<float>(), *pd = probs.data<float>();
  uint8_t* kp = keep.data<uint8_t>();
  auto probabilities = [&](int64_t t, float*) {
    tile_probabilities(L, D, W, scale, qd + shape.offset(t), kd + shape.offset(t), md + (t / heads) * L,
                       pd + t * shape.tile_size());
  };
  auto context = [&](int64_t t, float* scratch) {
    tile_context(L, D, W, pd + t * shape.tile_size(), p > 0.f ? kp + t * shape.tile_size() : nullptr, p,
                 vd + shape.offset(t), od + shape.offset(t), scratch);
  };
  if (p > 0.f) {  // the masks drawn (0.6-0.7 ms a layer at e5-small's shape) while the other threads compute tiles
    with_masks_drawn_alongside(kp, shape.tiles() * shape.tile_size(), shape.tile_size(), p, shape.tile_size(),
                               team_size(shape.tiles() * shape.tile_size()), probabilities, context);
  } else {
    for_tiles(shape, [&](int64_t t, float* scratch) {
      probabilities(t, scratch);
      context(t, scratch);
    });
  }
  return {out, probs, keep};
}

std::vector<paddle::Tensor> AttentionBackward(const paddle::Tensor& q, const paddle::Tensor& k,
                                              const paddle::Tensor& v, const paddle::Tensor& probs,
                                              const paddle::Tensor& keep, const paddle::Tensor& grad_out,
                                              int64_t heads, float scale, float p) {
  check_float32_cpu(grad_out, "grad_out");
  const AttentionShape shape(q, heads);
  const int64_t L = shape.length, W = shape.width, D = shape.head_dim;
  auto grad_q = paddle::empty(q.shape(), paddle::DataType::FLOAT32, paddle::CPUPlace());
  auto grad_k = paddle::empty(q.shape(), paddle::DataType::FLOAT32, paddle::CPUPlace());
  auto grad_v = paddle::empty(q.shape(), paddle::DataType::FLOAT32, paddle::CPUPlace());
  const float *qd = q.data<float>(), *kd = k.data<float>(), *vd = v.data<float>(), *pd = probs.data<float>();
  const float* go = grad_out.data<float>();
  float *gq = grad_q.data<float>(), *gk = grad_k.data<float>(), *gv = grad_v.data<float>();
  const uint8_t* kp = keep.data<uint8_t>();
  for_tiles(shape, [&](int64_t t, float* scratch) {
    const int64_t at = shape.offset(t);
    tile_backward(L, D, W, scale, p, pd + t * shape.tile_size(), p > 0.f ? kp + t * shape.tile_size() : nullptr,
                  qd + at, kd + at, vd + at, go + at, gq + at, gk + at, gv + at, scratch);
  });
  return {grad_q, grad_k, grad_v};
}

std::vector<std::vector<int64_t>> AttentionShapes(const std::vector<int64_t>& q, const std::vector<int64_t>&,
                                                  const std::vector<int64_t>&, const std::vector<int64_t>&,
                                                  int64_t heads, float, float p) {
  const int64_t tile_elements = q[0] * heads * q[1] * q[1];
  return {q, {q[0], heads, q[1], q[1]}, {p > 0.f ? tile_elements : 0}};
}

std::vector<paddle::DataType> AttentionDtypes(const paddle::DataType& q, const paddle::DataType&,
                                              const paddle::DataType&, const paddle::DataType&) {
  return {q, q, paddle::DataType::UINT8};
}

PD_BUILD_OP(paddle_ft_attention)
    .Inputs({"Q", "K", "V", "Mask"})
    .Outputs({"Out", "Probs", "Keep"})
    .Attrs({"heads: int64_t", "scale: float", "p: float"})
    .SetKernelFn(PD_KERNEL(AttentionForward))
    .SetInferShapeFn(PD_INFER_SHAPE(AttentionShapes))
    .SetInferDtypeFn(PD_INFER_DTYPE(AttentionDtypes));

PD_BUILD_GRAD_OP(paddle_ft_attention)
    .Inputs({"Q", "K", "V", "Probs", "Keep", paddle::Grad("Out")})
    .Outputs({paddle::Grad("Q"), paddle::Grad("K"), paddle::Grad("V")})
    .Attrs({"heads: int64_t", "scale: float", "p: float"})
    .SetKernelFn(PD_KERNEL(AttentionBackward));

// Attention within each text of a padding-free batch (train.runtime.packed_batches): the batch's texts side by side
// in one row of tokens, q, k, v [tokens, heads x head_dim], text s spanning tokens offsets[s] to offsets[s + 1]; each
// (text, head) tile is attention_core's over that text alone (no mask: a packed text has no padding), so a text gets
// what it gets in a batch of its own. Dropout's masks are drawn from Paddle's generator, tile after tile, before the
// tiles are computed (in another order than the padded kernel's, whose masks cover the padding too).
namespace {

struct PackedShape {
  int64_t tokens, width, heads, head_dim, longest = 0;
  std::vector<int64_t> starts, lengths, tile_at;  // per text; tile_at: where its first head's tile starts in probs

  PackedShape(const paddle::Tensor& q, const paddle::Tensor& offsets, int64_t num_heads) {
    const auto& shape = q.shape();
    PD_CHECK(shape.size() == 2, "q, k and v must be [tokens, heads x head_dim]");
    PD_CHECK(offsets.is_cpu() && offsets.dtype() == paddle::DataType::INT64, "offsets must be int64 on the CPU");
    tokens = shape[0], width = shape[1], heads = num_heads;
    PD_CHECK(heads > 0 && width % heads == 0, "the width of q must divide into the heads");
    head_dim = width / heads;
    const int64_t* o = offsets.data<int64_t>();
    const int64_t texts = offsets.numel() - 1;
    PD_CHECK(texts >= 1 && o[0] == 0 && o[texts] == tokens, "offsets must run from 0 to the number of tokens");
    int64_t at = 0;
    for (int64_t s = 0; s < texts; ++s) {
      PD_CHECK(o[s + 1] > o[s], "every packed text must have a token");
      starts.push_back(o[s]);
      lengths.push_back(o[s + 1] - o[s]);
      tile_at.push_back(at);
      at += heads * lengths.back() * lengths.back();
      longest = std::max(longest, lengths.back());
    }
    tile_at.push_back(at);
  }
  int64_t tiles() const { return static_cast<int64_t>(lengths.size()) * heads; }
  int64_t probs_size() const { return tile_at.back(); }
  int64_t length(int64_t t) const { return lengths[t / heads]; }
  int64_t offset(int64_t t) const { return starts[t / heads] * width + (t % heads) * head_dim; }
  int64_t probs_at(int64_t t) const { const int64_t L = length(t); return tile_at[t / heads] + (t % heads) * L * L; }
};

template <typename Body>
void for_packed_tiles(const PackedShape& shape, Body body) {
  const int threads = team_size(shape.probs_size());
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    std::vector<float> scratch(2 * shape.longest * shape.longest);
#pragma omp for schedule(dynamic)
    for (int64_t t = 0; t < shape.tiles(); ++t) body(t, scratch.data());
  }
}

}  // namespace

std::vector<paddle::Tensor> PackedAttentionForward(const paddle::Tensor& q, const paddle::Tensor& k,
                                                   const paddle::Tensor& v, const paddle::Tensor& offsets,
                                                   int64_t heads, float scale, float p) {
  for (const auto* t : {&q, &k, &v}) check_float32_cpu(*t, "q, k and v");
  const PackedShape shape(q, offsets, heads);
  PD_CHECK(k.shape() == q.shape() && v.shape() == q.shape(), "q, k and v must have the same shape");
  PD_CHECK(p >= 0.f && p < 1.f, "p must lie in [0, 1) (in float32)");
  const int64_t W = shape.width, D = shape.head_dim;
  auto out = paddle::empty(q.shape(), paddle::DataType::FLOAT32, paddle::CPUPlace());
  auto probs = paddle::empty({shape.probs_size()}, paddle::DataType::FLOAT32, paddle::CPUPlace());
  auto keep = paddle::empty({p > 0.f ? shape.probs_size() : 0}, paddle::DataType::UINT8, paddle::CPUPlace());
  const float *qd = q.data<float>(), *kd = k.data<float>(), *vd = v.data<float>();
  float *od = out.data<float>(), *pd = probs.data<float>();
  uint8_t* kp = keep.data<uint8_t>();
  if (p > 0.f) {
    MaskDrawer drawer(kp, shape.probs_size(), shape.probs_size(), p);
    drawer.draw();
  }
  const std::vector<float> no_mask(shape.longest, 0.f);
  for_packed_tiles(shape, [&](int64_t t, float* scratch) {
    const int64_t L = shape.length(t), at = shape.offset(t);
    float* y = pd + shape.probs_at(t);
    tile_probabilities(L, D, W, scale, qd + at, kd + at, no_mask.data(), y);
    tile_context(L, D, W, y, p > 0.f ? kp + shape.probs_at(t) : nullptr, p, vd + at, od + at, scratch);
  });
  return {out, probs, keep};
}

std::vector<paddle::Tensor> PackedAttentionBackward(const paddle::Tensor& q, const paddle::Tensor& k,
                                                    const paddle::Tensor& v, const paddle::Tensor& offsets,
                                                    const paddle::Tensor& probs, const paddle::Tensor& keep,
                                                    const paddle::Tensor& grad_out, int64_t heads, float scale,
                                                    float p) {
  check_float32_cpu(grad_out, "grad_out");
  const PackedShape shape(q, offsets, heads);
  const int64_t W = shape.width, D = shape.head_dim;
  auto grad_q = paddle::empty(q.shape(), paddle::DataType::FLOAT32, paddle::CPUPlace());
  auto grad_k = paddle::empty(q.shape(), paddle::DataType::FLOAT32, paddle::CPUPlace());
  auto grad_v = paddle::empty(q.shape(), paddle::DataType::FLOAT32, paddle::CPUPlace());
  const float *qd = q.data<float>(), *kd = k.data<float>(), *vd = v.data<float>(), *pd = probs.data<float>();
  const float* go = grad_out.data<float>();
  float *gq = grad_q.data<float>(), *gk = grad_k.data<float>(), *gv = grad_v.data<float>();
  const uint8_t* kp = keep.data<uint8_t>();
  for_packed_tiles(shape, [&](int64_t t, float* scratch) {
    const int64_t at = shape.offset(t);
    tile_backward(shape.length(t), D, W, scale, p, pd + shape.probs_at(t),
                  p > 0.f ? kp + shape.probs_at(t) : nullptr, qd + at, kd + at, vd + at, go + at, gq + at, gk + at,
                  gv + at, scratch);
  });
  return {grad_q, grad_k, grad_v};
}

PD_BUILD_OP(paddle_ft_packed_attention)
    .Inputs({"Q", "K", "V", "Offsets"})
    .Outputs({"Out", "Probs", "Keep"})
    .Attrs({"heads: int64_t", "scale: float", "p: float"})
    .SetKernelFn(PD_KERNEL(PackedAttentionForward))
    .SetInferDtypeFn(PD_INFER_DTYPE(AttentionDtypes));  // (the padded op's: the same outputs)

PD_BUILD_GRAD_OP(paddle_ft_packed_attention)
    .Inputs({"Q", "K", "V", "Offsets", "Probs", "Keep", paddle::Grad("Out")})
    .Outputs({paddle::Grad("Q"), paddle::Grad("K"), paddle::Grad("V")})
    .Attrs({"heads: int64_t", "scale: float", "p: float"})
    .SetKernelFn(PD_KERNEL(PackedAttentionBackward));
#endif  // PADDLE_FT_MKL

// Clipping by the global norm (the optimizer step's `clip_grad_norm`) over every gradient at once: the squares (each
// rounded to float) summed in double, in blocks of kGradientBlock added in block order (the same total on any number
// of threads, within ~1e-7 of a float64 sum); the factor min(1, max_norm / (norm + 1e-6)), and, where it is below 1
// and in_place, every gradient scaled by it (not in place: AdamW's fused update reads the gradients times the factor).
// One kernel instead of three Paddle ops per gradient (square, sum, multiply), each dispatched and run on one thread:
// 17.6-19.5 -> 6.9-7.0 ms a step for e5-small's gradients.
namespace {

constexpr int64_t kGradientBlock = 1 << 14;  // the passes over every gradient (clipping, AdamW) split in blocks of it

struct Span {
  float* data;
  int64_t size;
};

std::vector<Span> blocks_of(std::vector<paddle::Tensor>& tensors) {
  std::vector<Span> spans;
  for (auto& t : tensors) {
    check_float32_cpu(t, "every gradient");
    float* data = t.data<float>();
    for (int64_t begin = 0; begin < t.numel(); begin += kGradientBlock)
      spans.push_back({data + begin, std::min(kGradientBlock, t.numel() - begin)});
  }
  return spans;
}

}  // namespace

std::vector<paddle::Tensor> ClipGradNorm(std::vector<paddle::Tensor>& grads, float max_norm, bool in_place) {
  const std::vector<Span> spans = blocks_of(grads);
  const int64_t count = static_cast<int64_t>(spans.size());
  const int threads = team_size(count * kGradientBlock);
  std::vector<double> squares(spans.size());
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int64_t b = 0; b < count; ++b) {
    const float* x = spans[b].data;
    double lanes[kLanes] = {};  // lanes, not one running sum: GCC vectorises them
    int64_t j = 0;
    for (; j + kLanes <= spans[b].size; j += kLanes) {
      for (int64_t l = 0; l < kLanes; ++l) lanes[l] += x[j + l] * x[j + l];
    }
    double sum = 0.0;
    for (; j < spans[b].size; ++j) sum += x[j] * x[j];
    for (const double lane : lanes) sum += lane;
    squares[b] = sum;
  }
  double total = 0.0;
  for (double s : squares) total += s;
  auto norm = paddle::empty({}, paddle::DataType::FLOAT32, paddle::CPUPlace());
  auto factor = paddle::empty({}, paddle::DataType::FLOAT32, paddle::CPUPlace());
  const float global = static_cast<float>(std::sqrt(total));
  const float scale = max_norm / (global + 1e-6f);
  norm.data<float>()[0] = global;
  factor.data<float>()[0] = std::min(scale, 1.f);
  if (in_place && scale < 1.f) {
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
    for (int64_t b = 0; b < count; ++b) {
      float* x = spans[b].data;
      for (int64_t j = 0; j < spans[b].size; ++j) x[j] *= scale;
    }
  }
  return {norm, factor};
}

std::vector<std::vector<int64_t>> ClipGradNormShape(const std::vector<std::vector<int64_t>>&) { return {{}, {}}; }

std::vector<paddle::DataType> ClipGradNormDtype(const std::vector<paddle::DataType>&) {
  return {paddle::DataType::FLOAT32, paddle::DataType::FLOAT32};
}

PD_BUILD_OP(paddle_ft_clip_by_global_norm)  // (no "_grad" in a forward op's name: Paddle takes it for a gradient op)
    .Inputs({paddle::Vec("Grads")})
    .Outputs({paddle::Vec("GradsOut"), "Norm", "Factor"})
    .Attrs({"max_norm: float", "in_place: bool"})
    .SetInplaceMap({{paddle::Vec("Grads"), paddle::Vec("GradsOut")}})
    .SetKernelFn(PD_KERNEL(ClipGradNorm))
    .SetInferShapeFn(PD_INFER_SHAPE(ClipGradNormShape))
    .SetInferDtypeFn(PD_INFER_DTYPE(ClipGradNormDtype));

// AdamW's step over every parameter at once, as Paddle's CPU adamw kernel computes each (its reference loop): with
// the step's learning rate lr and the parameter's bias corrections b1p = beta1^t, b2p = beta2^t,
//   param -= lr * coeff * param (decoupled weight decay; coeff 0 for a parameter without decay, Paddle's adam),
//   m1 = beta1 m1 + (1 - beta1) g,  m2 = beta2 m2 + (1 - beta2) g g,
//   param += -lr sqrt(1 - b2p) / (1 - b1p) * m1 / (sqrt(m2) + eps sqrt(1 - b2p)),
// then b1p *= beta1, b2p *= beta2: the same tensors Paddle's optimizer keeps (its moments and beta powers), updated
// in place, so that its state_dict, checkpoints and later steps go on from them. Paddle dispatches one kernel per
// parameter from Python (~200 at e5-small's shape), the small ones on one thread; here the elements of all of them
// are split in blocks between the threads. settings: [parameters, 5] = lr, coeff, beta1, beta2, epsilon. Every
// gradient is read times grad_scale: clipping by the global norm folded in (the same products as gradients scaled in
// place first, without the pass over them that writes them back).
namespace {

struct AdamWConstants {
  float beta1, beta2, step_lr, step_eps, decay;
};

}  // namespace

void AdamWStep(std::vector<paddle::Tensor>& params, const std::vector<paddle::Tensor>& grads,
               std::vector<paddle::Tensor>& moment1, std::vector<paddle::Tensor>& moment2,
               std::vector<paddle::Tensor>& beta1_pows, std::vector<paddle::Tensor>& beta2_pows,
               const paddle::Tensor& settings, float grad_scale) {
  const size_t n = params.size();
  PD_CHECK(grads.size() == n && moment1.size() == n && moment2.size() == n && beta1_pows.size() == n &&
               beta2_pows.size() == n && settings.numel() == static_cast<int64_t>(n) * 5,
           "one gradient, two moments, two beta powers and a settings row per parameter");
  check_float32_cpu(settings, "settings");
  const float* rows = settings.data<float>();
  std::vector<AdamWConstants> constants(n);
  struct Block {
    size_t param;
    int64_t begin, end;
  };
  std::vector<Block> blocks;
  for (size_t i = 0; i < n; ++i) {
    for (const paddle::Tensor* t : std::initializer_list<const paddle::Tensor*>{
             &params[i], &grads[i], &moment1[i], &moment2[i], &beta1_pows[i], &beta2_pows[i]})
      check_float32_cpu(*t, "parameters, gradients, moments and beta powers");
    const int64_t size = params[i].numel();
    PD_CHECK(grads[i].numel() == size && moment1[i].numel() == size && moment2[i].numel() == size,
             "a gradient and the moments must have their parameter's size");
    const float* row = rows + 5 * i;
    const float lr = row[0], coeff = row[1], beta1 = row[2], beta2 = row[3], eps = row[4];
    const float b1p = beta1_pows[i].data<float>()[0], b2p = beta2_pows[i].data<float>()[0];
    constants[i] = {beta1, beta2, lr * (std::sqrt(1.f - b2p) / (1.f - b1p)), eps * std::sqrt(1.f - b2p),
                    lr * 1.f * coeff};  // Paddle's old_lr * lr_ratio * coeff, lr_ratio 1
    for (int64_t begin = 0; begin < size; begin += kGradientBlock)
      blocks.push_back({i, begin, std::min(size, begin + kGradientBlock)});
  }
  const int64_t count = static_cast<int64_t>(blocks.size());
  const int threads = team_size(count * kGradientBlock);
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int64_t b = 0; b < count; ++b) {
    const Block& block = blocks[b];
    const AdamWConstants& c = constants[block.param];
    float* p = params[block.param].data<float>();
    const float* g = grads[block.param].data<float>();
    float* m1 = moment1[block.param].data<float>();
    float* m2 = moment2[block.param].data<float>();
    for (int64_t j = block.begin; j < block.end; ++j) {
      const float grad = g[j] * grad_scale;
      const float decayed = p[j] - c.decay * p[j];
      const float first = c.beta1 * m1[j] + (1.f - c.beta1) * grad;
      const float second = c.beta2 * m2[j] + (1.f - c.beta2) * grad * grad;
      m1[j] = first;
      m2[j] = second;
      p[j] = decayed + -c.step_lr * (first / (std::sqrt(second) + c.step_eps));
    }
  }
  for (size_t i = 0; i < n; ++i) {
    beta1_pows[i].data<float>()[0] *= constants[i].beta1;
    beta2_pows[i].data<float>()[0] *= constants[i].beta2;
  }
}

PD_BUILD_OP(paddle_ft_adamw)
    .Inputs({paddle::Vec("Params"), paddle::Vec("Grads"), paddle::Vec("Moment1"), paddle::Vec("Moment2"),
             paddle::Vec("Beta1Pows"), paddle::Vec("Beta2Pows"), "Settings"})
    .Outputs({paddle::Vec("ParamsOut"), paddle::Vec("Moment1Out"), paddle::Vec("Moment2Out"),
              paddle::Vec("Beta1PowsOut"), paddle::Vec("Beta2PowsOut")})
    .Attrs({"grad_scale: float"})
    .SetInplaceMap({{paddle::Vec("Params"), paddle::Vec("ParamsOut")},
                    {paddle::Vec("Moment1"), paddle::Vec("Moment1Out")},
                    {paddle::Vec("Moment2"), paddle::Vec("Moment2Out")},
                    {paddle::Vec("Beta1Pows"), paddle::Vec("Beta1PowsOut")},
                    {paddle::Vec("Beta2Pows"), paddle::Vec("Beta2PowsOut")}})
    .SetKernelFn(PD_KERNEL(AdamWStep));

// bfloat16 matmuls for training on CPUs with bfloat16 arithmetic (AVX512-BF16, AMX), `train.amp` with
// dtype bfloat16 on CPU (paddle_ft/kernels/bf16.py): the operands rounded to bfloat16 (to nearest, ties to even, as
// Paddle's cast rounds), the products summed in float32 by oneDNN's bf16 GEMM, the library Paddle ships and runs its
// oneDNN kernels on. Paddle 3.3 has no CPU matmul kernel for bfloat16 and its auto_cast does nothing on a CPU, so
// the linear layers call these directly; everything else (weights, activations, gradients, the optimizer) stays
// float32. dnnl_gemm_bf16bf16f32 is exported by libdnnl and declared by oneDNN's own tests, not its public headers
// (which Paddle's wheel does not ship whole): its signature is dnnl_sgemm's, row-major.
#ifdef PADDLE_FT_DNNL
extern "C" int dnnl_gemm_bf16bf16f32(char transa, char transb, int64_t m, int64_t n, int64_t k, float alpha,
                                     const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float beta,
                                     float* c, int64_t ldc);

namespace {

inline uint16_t to_bfloat16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);  // NaN stays NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

void check_bf16_matrix(const paddle::Tensor& t, const char* name) {
  PD_CHECK(t.is_cpu(), name, " must be on the CPU");
  PD_CHECK(t.dtype() == paddle::DataType::BFLOAT16, name, " must be bfloat16");
  PD_CHECK(t.shape().size() == 2, name, " must be a matrix");
}

}  // namespace

std::vector<paddle::Tensor> ToBfloat16(const paddle::Tensor& x) {
  check_float32_cpu(x, "x");
  auto out = paddle::empty(x.shape(), paddle::DataType::BFLOAT16, x.place());
  const float* in = x.data<float>();
  uint16_t* o = reinterpret_cast<uint16_t*>(out.data<paddle::bfloat16>());
  for_blocks(x.numel(), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) o[i] = to_bfloat16(in[i]);
  });
  return {out};
}

std::vector<std::vector<int64_t>> ToBfloat16Shape(const std::vector<int64_t>& x) { return {x}; }
std::vector<paddle::DataType> ToBfloat16Dtype(const paddle::DataType&) { return {paddle::DataType::BFLOAT16}; }

PD_BUILD_OP(paddle_ft_to_bfloat16)
    .Inputs({"X"})
    .Outputs({"Out"})
    .SetKernelFn(PD_KERNEL(ToBfloat16))
    .SetInferShapeFn(PD_INFER_SHAPE(ToBfloat16Shape))
    .SetInferDtypeFn(PD_INFER_DTYPE(ToBfloat16Dtype));

// Out [m, n] float32 = op(A) op(B), A and B bfloat16 matrices, op a transpose where asked.
std::vector<paddle::Tensor> Bfloat16Gemm(const paddle::Tensor& a, const paddle::Tensor& b, bool transpose_a,
                                         bool transpose_b) {
  check_bf16_matrix(a, "a");
  check_bf16_matrix(b, "b");
  const int64_t m = transpose_a ? a.shape()[1] : a.shape()[0], k = transpose_a ? a.shape()[0] : a.shape()[1];
  const int64_t n = transpose_b ? b.shape()[0] : b.shape()[1];
  PD_CHECK((transpose_b ? b.shape()[1] : b.shape()[0]) == k, "the matrices' inner sizes differ");
  auto out = paddle::empty({m, n}, paddle::DataType::FLOAT32, a.place());
  const auto* a16 = reinterpret_cast<const uint16_t*>(a.data<paddle::bfloat16>());
  const auto* b16 = reinterpret_cast<const uint16_t*>(b.data<paddle::bfloat16>());
  const int status = dnnl_gemm_bf16bf16f32(transpose_a ? 'T' : 'N', transpose_b ? 'T' : 'N', m, n, k, 1.f, a16,
                                           a.shape()[1], b16, b.shape()[1], 0.f, out.data<float>(), n);
  PD_CHECK(status == 0, "oneDNN's bfloat16 GEMM failed (status ", status, ")");
  return {out};
}

std::vector<std::vector<int64_t>> Bfloat16GemmShape(const std::vector<int64_t>& a, const std::vector<int64_t>& b,
                                                    bool transpose_a, bool transpose_b) {
  return {{transpose_a ? a[1] : a[0], transpose_b ? b[0] : b[1]}};
}

std::vector<paddle::DataType> Bfloat16GemmDtype(const paddle::DataType&, const paddle::DataType&) {
  return {paddle::DataType::FLOAT32};
}

PD_BUILD_OP(paddle_ft_bfloat16_gemm)
    .Inputs({"A", "B"})
    .Outputs({"Out"})
    .Attrs({"transpose_a: bool", "transpose_b: bool"})
    .SetKernelFn(PD_KERNEL(Bfloat16Gemm))
    .SetInferShapeFn(PD_INFER_SHAPE(Bfloat16GemmShape))
    .SetInferDtypeFn(PD_INFER_DTYPE(Bfloat16GemmDtype));
#endif
