// One query per (row, query head) attending over the sampler's KV cache: the decode
// step's attention on x86 CPUs with AVX-512, as an XLA FFI custom call
// (graft_jax/models/decode_kernel.py builds and registers it).
//
// Inputs: q (B, K, G, H), the key cache (B, K, H, S), the value cache (B, K, S, H),
// this step's key and value k_new, v_new (B, K, H), the slot index (int32) and
// mask (B, S); attribute scale. First the new key and value are written at the
// slot (clamped into [0, S), as dynamic_update_slice does) of the caches, which
// are returned in place (aliased outputs 1 and 2); then output 0 (B, K, G, H),
// for each query:
//   x_s = mask_s ? scale * q . k_s : -1e30,  p = exp(x - max x) / sum exp(x - max x),
//   out = sum_s p_s v_s
// (a row that sees nothing averages all S values, as the XLA formulation does).
// H in {32, 64, 128, 256}; any G. Each (row, kv head) pair is one unit of work:
//   scores: the key rows streamed h by h into up to 4 queries' score rows at a
//           time (kept in L1; the keys are read once per 4 queries);
//   softmax: masked, with glibc's vector expf (libmvec);
//   values: streamed slot by slot into register accumulators, 4 queries at a time
//           (2 at H = 128, 1 at H = 256), scaled by 1 / sum at the end.
// The next pair's keys and values are prefetched into L2 while a pair runs; the
// pairs are split over XLA's intra-op thread pool (`Run`).
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "xla/ffi/api/ffi.h"

extern "C" __m512 _ZGVeN16v_expf(__m512);

namespace ffi = xla::ffi;
namespace {
constexpr float kMask = -1e30f;

inline __mmask16 Tail(int64_t n) { return n >= 16 ? 0xFFFF : (__mmask16)((1u << n) - 1); }

// Scores of Q queries (rows of q, H apart) into x (rows S apart): the key rows
// are streamed once, h by h, each adding q[j][h] * k[h, :] to the Q score rows.
// With `nk` and `nv` (the next pair's keys and values, H * S floats each), also
// prefetches 1/H of them into L2 per h.
template <int H, int Q>
inline void ScoreRows(const float* q, const float* k, int64_t S, float* x, const float* nkf,
                      const float* nvf) {
  const int64_t lines = H * S * 4 / 64, per_h = (lines + H - 1) / H;
  for (int h = 0; h < H; ++h) {
    if (nkf != nullptr) {
      const char* nk = reinterpret_cast<const char*>(nkf);
      const char* nv = reinterpret_cast<const char*>(nvf);
      for (int64_t i = h * per_h; i < std::min(lines, (h + 1) * per_h); ++i) {
        _mm_prefetch(nk + i * 64, _MM_HINT_T1);
        _mm_prefetch(nv + i * 64, _MM_HINT_T1);
      }
    }
    const float* krow = k + h * S;
    __m512 qj[Q];
    for (int j = 0; j < Q; ++j) qj[j] = _mm512_set1_ps(q[j * H + h]);
    for (int64_t s0 = 0; s0 < S; s0 += 16) {
      const __mmask16 t = Tail(S - s0);
      const __m512 kv = _mm512_maskz_loadu_ps(t, krow + s0);
      for (int j = 0; j < Q; ++j) {
        float* xj = x + j * S + s0;
        const __m512 prev = h == 0 ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(t, xj);
        _mm512_mask_storeu_ps(xj, t, _mm512_fmadd_ps(qj[j], kv, prev));
      }
    }
  }
}

// The next pair's keys `nk` and values `nv` (or null) are prefetched during the
// first pass over the keys.
template <int H>
void Scores(const float* q, int64_t G, const float* k, int64_t S, float* x, const float* nk,
            const float* nv) {
  int64_t g = 0;
  for (; g + 4 <= G; g += 4, nk = nv = nullptr)
    ScoreRows<H, 4>(q + g * H, k, S, x + g * S, nk, nv);
  switch (G - g) {
    case 3: ScoreRows<H, 3>(q + g * H, k, S, x + g * S, nk, nv); break;
    case 2: ScoreRows<H, 2>(q + g * H, k, S, x + g * S, nk, nv); break;
    case 1: ScoreRows<H, 1>(q + g * H, k, S, x + g * S, nk, nv); break;
    default: break;
  }
}

// Masked, scaled softmax of one score row in place; returns 1 / (sum of its exps).
inline float Softmax(float* x, const bool* mask, int64_t S, float scale) {
  const __m512 sc = _mm512_set1_ps(scale), neg = _mm512_set1_ps(kMask);
  __m512 m = neg;
  for (int64_t s0 = 0; s0 < S; s0 += 16) {
    const __mmask16 t = Tail(S - s0);
    const __m512i mi = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(t, mask + s0));
    const __mmask16 live = _mm512_test_epi32_mask(mi, mi) & t;
    const __m512 a = _mm512_mask_mul_ps(neg, live, _mm512_maskz_loadu_ps(t, x + s0), sc);
    m = _mm512_mask_max_ps(m, t, m, a);
    _mm512_mask_storeu_ps(x + s0, t, a);
  }
  const __m512 mx = _mm512_set1_ps(_mm512_reduce_max_ps(m));
  __m512 l = _mm512_setzero_ps();
  for (int64_t s0 = 0; s0 < S; s0 += 16) {
    const __mmask16 t = Tail(S - s0);
    const __m512 p =
        _mm512_maskz_mov_ps(t, _ZGVeN16v_expf(_mm512_sub_ps(_mm512_maskz_loadu_ps(t, x + s0), mx)));
    l = _mm512_add_ps(l, p);
    _mm512_mask_storeu_ps(x + s0, t, p);
  }
  return 1.0f / _mm512_reduce_add_ps(l);
}

// out[j] = inv[j] * sum_s p[j][s] v_s for Q queries (p rows S apart, out rows H apart).
template <int H, int Q>
inline void Values(const float* p, const float* v, int64_t S, const float* inv, float* out) {
  constexpr int V = H / 16;
  __m512 acc[Q][V];
  for (int j = 0; j < Q; ++j)
    for (int i = 0; i < V; ++i) acc[j][i] = _mm512_setzero_ps();
  for (int64_t s = 0; s < S; ++s) {
    __m512 vv[V];
    for (int i = 0; i < V; ++i) vv[i] = _mm512_loadu_ps(v + s * H + 16 * i);
    for (int j = 0; j < Q; ++j) {
      const __m512 pj = _mm512_set1_ps(p[j * S + s]);
      for (int i = 0; i < V; ++i) acc[j][i] = _mm512_fmadd_ps(pj, vv[i], acc[j][i]);
    }
  }
  for (int j = 0; j < Q; ++j) {
    const __m512 c = _mm512_set1_ps(inv[j]);
    for (int i = 0; i < V; ++i) _mm512_storeu_ps(out + j * H + 16 * i, _mm512_mul_ps(acc[j][i], c));
  }
}

template <int H>
void AllValues(const float* p, int64_t G, const float* v, int64_t S, const float* inv, float* out) {
  constexpr int kQ = H <= 64 ? 4 : (H == 128 ? 2 : 1);  // accumulators + one slot's values fit
  for (int64_t g = 0; g < G;) {
    const int64_t n = std::min<int64_t>(kQ, G - g);
    const float *pg = p + g * S, *ig = inv + g;
    float* og = out + g * H;
    if constexpr (kQ >= 4) if (n == 4) { Values<H, 4>(pg, v, S, ig, og); g += 4; continue; }
    if constexpr (kQ >= 3) if (n == 3) { Values<H, 3>(pg, v, S, ig, og); g += 3; continue; }
    if constexpr (kQ >= 2) if (n == 2) { Values<H, 2>(pg, v, S, ig, og); g += 2; continue; }
    Values<H, 1>(pg, v, S, ig, og);
    g += 1;
  }
}

// Pairs [r0, r1) of (row, kv head); x holds G score rows of S, inv G floats. Each
// pair first writes its new key and value at slot `slot` of its own cache rows.
template <int H>
void Pairs(int64_t r0, int64_t r1, int64_t K, int64_t G, int64_t S, int64_t slot, float scale,
           const float* q, float* kc, float* vc, const float* kn, const float* vn,
           const bool* mask, float* out, float* x, float* inv) {
  for (int64_t r = r0; r < r1; ++r) {
    float* kr = kc + r * H * S;
    float* vr = vc + r * S * H;
    for (int h = 0; h < H; ++h) kr[h * S + slot] = kn[r * H + h];
    std::memcpy(vr + slot * H, vn + r * H, sizeof(float) * H);
    const bool more = r + 1 < r1;
    Scores<H>(q + r * G * H, G, kr, S, x, more ? kr + H * S : nullptr,
              more ? vr + S * H : nullptr);
    const bool* mr = mask + (r / K) * S;
    for (int64_t g = 0; g < G; ++g) inv[g] = Softmax(x + g * S, mr, S, scale);
    AllValues<H>(x, G, vr, S, inv, out + r * G * H);
  }
}

// The pairs in chunks, taken from a shared counter by the calling thread and by
// up to num_threads - 1 tasks on XLA's intra-op pool. The caller never waits for a
// task to start, only for chunks already taken to finish: with several devices in
// one process (each calling this at once on the same pool) a task may start late
// or after the call has returned, and then finds no chunk left. The state it
// reads is shared-owned; it touches no buffer unless it takes a chunk.
struct Chunks {
  explicit Chunks(int64_t n) : total(n) {}
  const int64_t total;
  std::atomic<int64_t> next{0}, done{0};
};

template <int H>
void Run(ffi::ThreadPool& pool, int64_t B, int64_t K, int64_t G, int64_t S, int64_t slot,
         float scale, const float* q, float* k, float* v, const float* kn, const float* vn,
         const bool* mask, float* out) {
  const int64_t pairs = B * K;
  const int64_t threads = std::max<int64_t>(1, std::min<int64_t>(pool.num_threads(), pairs));
  const int64_t per_chunk = std::max<int64_t>(1, pairs / (4 * threads));
  auto chunks = std::make_shared<Chunks>((pairs + per_chunk - 1) / per_chunk);
  auto work = [=] {
    std::vector<float> x(G * S + 16), inv(G);
    for (int64_t c; (c = chunks->next.fetch_add(1)) < chunks->total;) {
      const int64_t r0 = c * per_chunk, r1 = std::min(pairs, r0 + per_chunk);
      Pairs<H>(r0, r1, K, G, S, slot, scale, q, k, v, kn, vn, mask, out, x.data(), inv.data());
      chunks->done.fetch_add(1, std::memory_order_release);
    }
  };
  for (int64_t t = 1; t < threads; ++t) pool.Schedule([work] { work(); });
  work();
  while (chunks->done.load(std::memory_order_acquire) < chunks->total) std::this_thread::yield();
}

ffi::Error DecodeAttention(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> q,
                           ffi::Buffer<ffi::F32> k, ffi::Buffer<ffi::F32> v,
                           ffi::Buffer<ffi::F32> k_new, ffi::Buffer<ffi::F32> v_new,
                           ffi::Buffer<ffi::S32> index, ffi::Buffer<ffi::PRED> mask, float scale,
                           ffi::ResultBuffer<ffi::F32> out, ffi::ResultBuffer<ffi::F32> k_out,
                           ffi::ResultBuffer<ffi::F32> v_out) {
  const auto qd = q.dimensions(), kd = k.dimensions(), vd = v.dimensions(),
             knd = k_new.dimensions(), vnd = v_new.dimensions(), md = mask.dimensions();
  if (qd.size() != 4 || kd.size() != 4 || vd.size() != 4 || knd.size() != 3 ||
      vnd.size() != 3 || md.size() != 2 || index.element_count() != 1)
    return ffi::Error::InvalidArgument(
        "decode attention: q, k, v of rank 4, k_new and v_new of rank 3, mask of rank 2, "
        "one index");
  const int64_t B = qd[0], K = qd[1], G = qd[2], H = qd[3], S = kd[3];
  if (kd[0] != B || kd[1] != K || kd[2] != H || vd[0] != B || vd[1] != K || vd[2] != S ||
      vd[3] != H || md[0] != B || md[1] != S || knd[0] != B || knd[1] != K || knd[2] != H ||
      vnd[0] != B || vnd[1] != K || vnd[2] != H)
    return ffi::Error::InvalidArgument(
        "decode attention: need q (B, K, G, H), k (B, K, H, S), v (B, K, S, H), k_new and "
        "v_new (B, K, H), mask (B, S)");
  if (S < 1) return ffi::Error::InvalidArgument("decode attention: the cache has no slot");
  // The caches are aliased to k_out and v_out (written in place); were XLA ever to
  // give separate buffers, they are copied first.
  float* kp = k_out->typed_data();
  float* vp = v_out->typed_data();
  if (kp != k.typed_data()) std::memcpy(kp, k.typed_data(), sizeof(float) * k.element_count());
  if (vp != v.typed_data()) std::memcpy(vp, v.typed_data(), sizeof(float) * v.element_count());
  // As XLA's dynamic_update_slice: the slot is clamped into the cache.
  const int64_t slot = std::clamp<int64_t>(index.typed_data()[0], 0, S - 1);
  const float* qp = q.typed_data();
  const float* knp = k_new.typed_data();
  const float* vnp = v_new.typed_data();
  const bool* mp = mask.typed_data();
  float* op = out->typed_data();
  switch (H) {
    case 32: Run<32>(pool, B, K, G, S, slot, scale, qp, kp, vp, knp, vnp, mp, op); break;
    case 64: Run<64>(pool, B, K, G, S, slot, scale, qp, kp, vp, knp, vnp, mp, op); break;
    case 128: Run<128>(pool, B, K, G, S, slot, scale, qp, kp, vp, knp, vnp, mp, op); break;
    case 256: Run<256>(pool, B, K, G, S, slot, scale, qp, kp, vp, knp, vnp, mp, op); break;
    default: return ffi::Error::InvalidArgument("decode attention: head_dim 32, 64, 128 or 256");
  }
  return ffi::Error::Success();
}
}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(GraftDecodeAttention, DecodeAttention,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Arg<ffi::Buffer<ffi::PRED>>()
                                  .Attr<float>("scale")
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());
