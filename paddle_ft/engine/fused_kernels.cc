// Fused CPU kernels for training (float32), built on first use by paddle_ft/engine/fused.py through Paddle's
// custom-operator support. Each replaces a composition of Paddle ops whose CPU kernels are slow for their size
// (docs/performance.md has the profile): the post-norm residual step `layer_norm(x + residual)` and exact GELU,
// forward and backward, attention's `softmax(scores + mask)`, and dropout drawing Paddle's own masks. They compute
// the same function as the composition; tests/engine/test_fused.py holds them
// to it (forward and gradients, 1e-5). Single-threaded on purpose: Paddle's math runs on Intel OpenMP, whose
// threads spin between calls, and a second thread pool fights them for the cores (these loops under GCC's OpenMP
// with 2 threads halved the bench's training speed on 2 cores); they are memory-bound and vectorised, and one
// thread already beats Paddle's kernels several times over.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "paddle/extension.h"

namespace {

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

}  // namespace

// out = layer_norm(x + residual) * weight + bias over the last axis; also the rows' mean and 1/std, which the
// backward reads instead of recomputing them.
std::vector<paddle::Tensor> AddLayerNormForward(const paddle::Tensor& x, const paddle::Tensor& residual,
                                                const paddle::Tensor& weight, const paddle::Tensor& bias,
                                                float epsilon) {
  for (auto [t, name] : {std::pair{&x, "x"}, {&residual, "residual"}, {&weight, "weight"},
                         {&bias, "bias"}}) {
    check_float32_cpu(*t, name);
  }
  PD_CHECK(x.shape() == residual.shape(), "x and residual differ in shape");
  const int64_t width = x.shape().back(), rows = x.numel() / width;
  PD_CHECK(weight.numel() == width && bias.numel() == width, "weight and bias must match the last axis");
  auto out = paddle::empty(x.shape(), paddle::DataType::FLOAT32, paddle::CPUPlace());
  auto mean = paddle::empty({rows}, paddle::DataType::FLOAT32, paddle::CPUPlace());
  auto inv_std = paddle::empty({rows}, paddle::DataType::FLOAT32, paddle::CPUPlace());
  const float *a = x.data<float>(), *b = residual.data<float>(), *w = weight.data<float>(), *c = bias.data<float>();
  float *o = out.data<float>(), *m = mean.data<float>(), *s = inv_std.data<float>();
  for (int64_t r = 0; r < rows; ++r) {
    const float *ar = a + r * width, *br = b + r * width;
    float* orow = o + r * width;
    float sum = 0.f;
    for (int64_t j = 0; j < width; ++j) {
      orow[j] = ar[j] + br[j];
      sum += orow[j];
    }
    const float mu = sum / width;
    float squares = 0.f;
    for (int64_t j = 0; j < width; ++j) {
      const float d = orow[j] - mu;
      squares += d * d;
    }
    const float inv = 1.f / std::sqrt(squares / width + epsilon);
    for (int64_t j = 0; j < width; ++j) orow[j] = (orow[j] - mu) * inv * w[j] + c[j];
    m[r] = mu;
    s[r] = inv;
  }
  return {out, mean, inv_std};
}

// The gradients of x and residual (equal: both enter as one sum; two tensors all the same, as Paddle may add
// into either in place), weight and bias.
std::vector<paddle::Tensor> AddLayerNormBackward(const paddle::Tensor& x, const paddle::Tensor& residual,
                                                 const paddle::Tensor& weight, const paddle::Tensor& mean,
                                                 const paddle::Tensor& inv_std, const paddle::Tensor& grad_out) {
  check_float32_cpu(grad_out, "grad_out");
  const int64_t width = x.shape().back(), rows = x.numel() / width;
  auto grad_x = paddle::empty(x.shape(), paddle::DataType::FLOAT32, paddle::CPUPlace());
  auto grad_residual = paddle::empty(x.shape(), paddle::DataType::FLOAT32, paddle::CPUPlace());
  auto grad_weight = paddle::empty(weight.shape(), paddle::DataType::FLOAT32, paddle::CPUPlace());
  auto grad_bias = paddle::empty(weight.shape(), paddle::DataType::FLOAT32, paddle::CPUPlace());
  const float *a = x.data<float>(), *b = residual.data<float>(), *w = weight.data<float>();
  const float *m = mean.data<float>(), *s = inv_std.data<float>(), *g = grad_out.data<float>();
  float *gx = grad_x.data<float>(), *gres = grad_residual.data<float>();
  float *gw = grad_weight.data<float>(), *gb = grad_bias.data<float>();
  std::vector<double> weight_acc(width, 0.0), bias_acc(width, 0.0);  // sums over many rows: kept in double
  std::vector<float> normalised(width);
  for (int64_t r = 0; r < rows; ++r) {
    const float *ar = a + r * width, *br = b + r * width, *gr = g + r * width;
    float *gxr = gx + r * width, *gresr = gres + r * width;
    const float mu = m[r], inv = s[r];
    float dot_g = 0.f, dot_gx = 0.f;  // sum of dy*w, and of dy*w*x_hat
    for (int64_t j = 0; j < width; ++j) {
      normalised[j] = (ar[j] + br[j] - mu) * inv;
      const float gy = gr[j] * w[j];
      dot_g += gy;
      dot_gx += gy * normalised[j];
      weight_acc[j] += gr[j] * normalised[j];
      bias_acc[j] += gr[j];
    }
    const float mean_g = dot_g / width, mean_gx = dot_gx / width;
    for (int64_t j = 0; j < width; ++j) {
      gxr[j] = inv * (gr[j] * w[j] - mean_g - normalised[j] * mean_gx);
      gresr[j] = gxr[j];
    }
  }
  for (int64_t j = 0; j < width; ++j) {
    gw[j] = static_cast<float>(weight_acc[j]);
    gb[j] = static_cast<float>(bias_acc[j]);
  }
  return {grad_x, grad_residual, grad_weight, grad_bias};
}

std::vector<std::vector<int64_t>> AddLayerNormShape(const std::vector<int64_t>& x, const std::vector<int64_t>&,
                                                    const std::vector<int64_t>&, const std::vector<int64_t>&) {
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < x.size(); ++i) rows *= x[i];
  return {x, {rows}, {rows}};
}

std::vector<paddle::DataType> AddLayerNormDtype(const paddle::DataType& x, const paddle::DataType&,
                                                const paddle::DataType&, const paddle::DataType&) {
  return {x, paddle::DataType::FLOAT32, paddle::DataType::FLOAT32};
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

// Exact GELU: x * (1 + erf(x / sqrt 2)) / 2.
std::vector<paddle::Tensor> GeluForward(const paddle::Tensor& x) {
  check_float32_cpu(x, "x");
  auto out = paddle::empty(x.shape(), paddle::DataType::FLOAT32, paddle::CPUPlace());
  const float* a = x.data<float>();
  float* o = out.data<float>();
  const int64_t n = x.numel();
  for (int64_t i = 0; i < n; ++i) o[i] = 0.5f * a[i] * (1.f + fast_erf(a[i] * kInvSqrt2));
  return {out};
}

// d gelu / dx = (1 + erf(x / sqrt 2)) / 2 + x * exp(-x^2 / 2) / sqrt(2 pi)
std::vector<paddle::Tensor> GeluBackward(const paddle::Tensor& x, const paddle::Tensor& grad_out) {
  check_float32_cpu(grad_out, "grad_out");
  auto grad_x = paddle::empty(x.shape(), paddle::DataType::FLOAT32, paddle::CPUPlace());
  const float *a = x.data<float>(), *g = grad_out.data<float>();
  float* gx = grad_x.data<float>();
  const int64_t n = x.numel();
  for (int64_t i = 0; i < n; ++i) {
    const float v = a[i];
    const float cdf = 0.5f * (1.f + fast_erf(v * kInvSqrt2));
    gx[i] = g[i] * (cdf + v * kInvSqrt2Pi * fast_exp(-0.5f * v * v));
  }
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
  for (int64_t r = 0; r < rows; ++r) {
    const float *ar = a + r * keys, *mr = m + (r / rows_per_text) * keys;
    float* orow = o + r * keys;
    float top = -INFINITY;
    for (int64_t j = 0; j < keys; ++j) {
      orow[j] = ar[j] + mr[j];
      top = orow[j] > top ? orow[j] : top;
    }
    float sum = 0.f;
    for (int64_t j = 0; j < keys; ++j) {
      orow[j] = fast_exp(orow[j] - top);
      sum += orow[j];
    }
    const float inv = 1.f / sum;
    for (int64_t j = 0; j < keys; ++j) orow[j] *= inv;
  }
  return {out};
}

// d scores = y * (dy - sum(dy * y)) per row; the mask is a constant (no gradient).
std::vector<paddle::Tensor> MaskedSoftmaxBackward(const paddle::Tensor& out, const paddle::Tensor& grad_out) {
  check_float32_cpu(grad_out, "grad_out");
  const int64_t keys = out.shape().back(), rows = out.numel() / keys;
  auto grad_scores = paddle::empty(out.shape(), paddle::DataType::FLOAT32, paddle::CPUPlace());
  const float *y = out.data<float>(), *g = grad_out.data<float>();
  float* gs = grad_scores.data<float>();
  for (int64_t r = 0; r < rows; ++r) {
    const float *yr = y + r * keys, *gr = g + r * keys;
    float* gsr = gs + r * keys;
    float dot = 0.f;
    for (int64_t j = 0; j < keys; ++j) dot += gr[j] * yr[j];
    for (int64_t j = 0; j < keys; ++j) gsr[j] = yr[j] * (gr[j] - dot);
  }
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

// Paddle's CPU dropout (upscale_in_train) with the masks Paddle would draw: one std::uniform_real_distribution<float>
// (0, 1) draw per element from Paddle's CPU generator (an mt19937_64, whose state comes in as text and goes back out
// advanced, as bytes), an element dropped where its draw is below p, the kept ones divided by 1 - p. One pass, the
// draws and the mask together, without Paddle's per-element overheads: about twice as fast for the same numbers.
std::vector<paddle::Tensor> DropoutForward(const paddle::Tensor& x, float p, const std::string& engine_state) {
  check_float32_cpu(x, "x");
  std::mt19937_64 engine;
  std::istringstream(engine_state) >> engine;
  std::uniform_real_distribution<float> draw(0.f, 1.f);
  auto out = paddle::empty(x.shape(), paddle::DataType::FLOAT32, paddle::CPUPlace());
  auto mask = paddle::empty(x.shape(), paddle::DataType::UINT8, paddle::CPUPlace());
  const float* a = x.data<float>();
  float* o = out.data<float>();
  uint8_t* m = mask.data<uint8_t>();
  const float keep_share = 1.f - p;
  const int64_t n = x.numel();
  for (int64_t i = 0; i < n; ++i) {
    const bool keep = !(draw(engine) < p);
    m[i] = keep;
    o[i] = keep ? a[i] / keep_share : 0.f;
  }
  std::ostringstream advanced;
  advanced << engine;
  const std::string text = advanced.str();
  auto state = paddle::empty({static_cast<int64_t>(text.size())}, paddle::DataType::UINT8, paddle::CPUPlace());
  std::memcpy(state.data<uint8_t>(), text.data(), text.size());
  return {out, mask, state};
}

std::vector<paddle::Tensor> DropoutBackward(const paddle::Tensor& mask, const paddle::Tensor& grad_out, float p) {
  check_float32_cpu(grad_out, "grad_out");
  auto grad_x = paddle::empty(grad_out.shape(), paddle::DataType::FLOAT32, paddle::CPUPlace());
  const uint8_t* m = mask.data<uint8_t>();
  const float* g = grad_out.data<float>();
  float* gx = grad_x.data<float>();
  const float keep_share = 1.f - p;
  const int64_t n = grad_out.numel();
  for (int64_t i = 0; i < n; ++i) gx[i] = m[i] ? g[i] / keep_share : 0.f;
  return {grad_x};
}

std::vector<std::vector<int64_t>> DropoutShape(const std::vector<int64_t>& x) { return {x, x, {-1}}; }

std::vector<paddle::DataType> DropoutDtype(const paddle::DataType& x) {
  return {x, paddle::DataType::UINT8, paddle::DataType::UINT8};
}

PD_BUILD_OP(paddle_ft_dropout)
    .Inputs({"X"})
    .Outputs({"Out", "Mask", "EngineState"})
    .Attrs({"p: float", "engine_state: std::string"})
    .SetKernelFn(PD_KERNEL(DropoutForward))
    .SetInferShapeFn(PD_INFER_SHAPE(DropoutShape))
    .SetInferDtypeFn(PD_INFER_DTYPE(DropoutDtype));

PD_BUILD_GRAD_OP(paddle_ft_dropout)
    .Inputs({"Mask", paddle::Grad("Out")})
    .Outputs({paddle::Grad("X")})
    .Attrs({"p: float"})
    .SetKernelFn(PD_KERNEL(DropoutBackward));
