// One query per row attending over a KV cache, for a decode step on CPU: a candidate
// kernel measured by launch/bench_decode_attention.py, not used by the library.
//
// Inputs: q (B, K, G, H), the key cache (B, K, H, S), the value cache (B, K, S, H),
// mask (B, S); attribute scale. Output (B, K, G, H):
//   x_s = mask_s ? scale * q . k_s : -1e30,  p = softmax(x),  out = sum_s p_s v_s.
// G = 2 and H = 64 only (the benchmark model); AVX-512. Each (row, kv head) pair
// streams its keys row by row into two score rows, takes the softmax with glibc's
// vector expf, and streams its values into eight register accumulators, while
// prefetching the next pair's cache; the pairs are split over XLA's intra-op pool.
#include <immintrin.h>
#include <algorithm>
#include <cstdint>
#include <latch>

#include "xla/ffi/api/ffi.h"

extern "C" __m512 _ZGVeN16v_expf(__m512);

namespace ffi = xla::ffi;
namespace {
constexpr float kMask = -1e30f;

inline __mmask16 Tail(int64_t n) { return n >= 16 ? 0xFFFF : (__mmask16)((1u << n) - 1); }

// G = 2 queries per kv head, H = 64.
void Pairs(int64_t r0, int64_t r1, int64_t K, int64_t S, float scale, const float* q,
           const float* kc, const float* vc, const bool* mask, float* out, float* x) {
  float* x0 = x;
  float* x1 = x + S;
  for (int64_t r = r0; r < r1; ++r) {
    const float* qr = q + r * 128;
    const float* kr = kc + r * 64 * S;
    const float* vr = vc + r * S * 64;
    const bool* mr = mask + (r / K) * S;
    for (int64_t s0 = 0; s0 < S; s0 += 16) {
      const __mmask16 t = Tail(S - s0);
      _mm512_mask_storeu_ps(x0 + s0, t, _mm512_setzero_ps());
      _mm512_mask_storeu_ps(x1 + s0, t, _mm512_setzero_ps());
    }
    const char* nk = reinterpret_cast<const char*>(kr + 64 * S);
    const char* nv = reinterpret_cast<const char*>(vr + 64 * S);
    const int64_t lines = (64 * S * 4) / 64;
    const int64_t per_h = (lines + 63) / 64;
    for (int h = 0; h < 64; ++h) {
      if (r + 1 < r1)
        for (int64_t i = h * per_h; i < std::min(lines, (h + 1) * per_h); ++i) {
          _mm_prefetch(nk + i * 64, _MM_HINT_T1);
          _mm_prefetch(nv + i * 64, _MM_HINT_T1);
        }
      const float* krow = kr + h * S;
      const __m512 q0 = _mm512_set1_ps(qr[h]), q1 = _mm512_set1_ps(qr[64 + h]);
      for (int64_t s0 = 0; s0 < S; s0 += 16) {
        const __mmask16 t = Tail(S - s0);
        const __m512 kv = _mm512_maskz_loadu_ps(t, krow + s0);
        _mm512_mask_storeu_ps(x0 + s0, t, _mm512_fmadd_ps(q0, kv, _mm512_maskz_loadu_ps(t, x0 + s0)));
        _mm512_mask_storeu_ps(x1 + s0, t, _mm512_fmadd_ps(q1, kv, _mm512_maskz_loadu_ps(t, x1 + s0)));
      }
    }
    __m512 m0 = _mm512_set1_ps(kMask), m1 = m0;
    for (int64_t s0 = 0; s0 < S; s0 += 16) {
      const __mmask16 t = Tail(S - s0);
      __m512 a0 = _mm512_maskz_loadu_ps(t, x0 + s0), a1 = _mm512_maskz_loadu_ps(t, x1 + s0);
      const __m128i mb = _mm_maskz_loadu_epi8(t, mr + s0);
      const __m512i mi = _mm512_cvtepu8_epi32(mb);
      const __mmask16 live = _mm512_test_epi32_mask(mi, mi) & t;
      const __m512 sc = _mm512_set1_ps(scale), neg = _mm512_set1_ps(kMask);
      a0 = _mm512_mask_mul_ps(neg, live, a0, sc);
      a1 = _mm512_mask_mul_ps(neg, live, a1, sc);
      m0 = _mm512_mask_max_ps(m0, t, m0, a0);
      m1 = _mm512_mask_max_ps(m1, t, m1, a1);
      _mm512_mask_storeu_ps(x0 + s0, t, a0);
      _mm512_mask_storeu_ps(x1 + s0, t, a1);
    }
    const __m512 mx0 = _mm512_set1_ps(_mm512_reduce_max_ps(m0));
    const __m512 mx1 = _mm512_set1_ps(_mm512_reduce_max_ps(m1));
    __m512 l0 = _mm512_setzero_ps(), l1 = l0;
    for (int64_t s0 = 0; s0 < S; s0 += 16) {
      const __mmask16 t = Tail(S - s0);
      const __m512 p0 = _mm512_maskz_mov_ps(t, _ZGVeN16v_expf(_mm512_sub_ps(_mm512_maskz_loadu_ps(t, x0 + s0), mx0)));
      const __m512 p1 = _mm512_maskz_mov_ps(t, _ZGVeN16v_expf(_mm512_sub_ps(_mm512_maskz_loadu_ps(t, x1 + s0), mx1)));
      l0 = _mm512_add_ps(l0, p0);
      l1 = _mm512_add_ps(l1, p1);
      _mm512_mask_storeu_ps(x0 + s0, t, p0);
      _mm512_mask_storeu_ps(x1 + s0, t, p1);
    }
    __m512 o00 = _mm512_setzero_ps(), o01 = o00, o02 = o00, o03 = o00;
    __m512 o10 = o00, o11 = o00, o12 = o00, o13 = o00;
    for (int64_t s = 0; s < S; ++s) {
      const float* vrow = vr + s * 64;
      const __m512 v0 = _mm512_loadu_ps(vrow), v1 = _mm512_loadu_ps(vrow + 16);
      const __m512 v2 = _mm512_loadu_ps(vrow + 32), v3 = _mm512_loadu_ps(vrow + 48);
      const __m512 p0 = _mm512_set1_ps(x0[s]), p1 = _mm512_set1_ps(x1[s]);
      o00 = _mm512_fmadd_ps(p0, v0, o00); o01 = _mm512_fmadd_ps(p0, v1, o01);
      o02 = _mm512_fmadd_ps(p0, v2, o02); o03 = _mm512_fmadd_ps(p0, v3, o03);
      o10 = _mm512_fmadd_ps(p1, v0, o10); o11 = _mm512_fmadd_ps(p1, v1, o11);
      o12 = _mm512_fmadd_ps(p1, v2, o12); o13 = _mm512_fmadd_ps(p1, v3, o13);
    }
    const __m512 i0 = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(l0));
    const __m512 i1 = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(l1));
    float* o = out + r * 128;
    _mm512_storeu_ps(o, _mm512_mul_ps(o00, i0)); _mm512_storeu_ps(o + 16, _mm512_mul_ps(o01, i0));
    _mm512_storeu_ps(o + 32, _mm512_mul_ps(o02, i0)); _mm512_storeu_ps(o + 48, _mm512_mul_ps(o03, i0));
    _mm512_storeu_ps(o + 64, _mm512_mul_ps(o10, i1)); _mm512_storeu_ps(o + 80, _mm512_mul_ps(o11, i1));
    _mm512_storeu_ps(o + 96, _mm512_mul_ps(o12, i1)); _mm512_storeu_ps(o + 112, _mm512_mul_ps(o13, i1));
  }
}

ffi::Error DecodeAttention(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> q,
                           ffi::Buffer<ffi::F32> k, ffi::Buffer<ffi::F32> v,
                           ffi::Buffer<ffi::PRED> mask, float scale,
                           ffi::ResultBuffer<ffi::F32> out) {
  auto qd = q.dimensions();
  const int64_t B = qd[0], K = qd[1], S = k.dimensions()[3];
  if (qd[2] != 2 || qd[3] != 64) return ffi::Error::InvalidArgument("G=2, H=64 only");
  const int64_t pairs = B * K;
  const int64_t threads = std::max<int64_t>(1, std::min<int64_t>(pool.num_threads(), pairs));
  const int64_t chunk = (pairs + threads - 1) / threads;
  auto run = [&, S, K, scale](int64_t r0, int64_t r1) {
    float* x = new float[2 * S + 32];
    Pairs(r0, r1, K, S, scale, q.typed_data(), k.typed_data(), v.typed_data(),
          mask.typed_data(), out->typed_data(), x);
    delete[] x;
  };
  std::latch done(threads - 1);
  for (int64_t t = 1; t < threads; ++t) {
    const int64_t r0 = t * chunk, r1 = std::min(pairs, r0 + chunk);
    pool.Schedule([&, r0, r1] { if (r0 < r1) run(r0, r1); done.count_down(); });
  }
  run(0, std::min(pairs, chunk));
  done.wait();
  return ffi::Error::Success();
}
}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(GraftDecodeAttention, DecodeAttention,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::PRED>>()
                                  .Attr<float>("scale")
                                  .Ret<ffi::Buffer<ffi::F32>>());
