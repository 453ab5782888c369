// One query per (row, query head) attending over the sampler's KV cache: the decode
// step's attention on x86 CPUs as an XLA FFI custom call, built for AVX-512
// (-march=x86-64-v4) or for AVX2 with FMA (-march=x86-64-v3) from this one source
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
// A row that sees something reads only its live span (`Span`): from its first
// live slot (rounded down to a whole vector) to its last. Outside it every p_s is
// exactly 0 (exp of -1e30 minus a live score underflows), so skipping those slots
// leaves each sum as it was; the sampler's rows leave the slots past the step
// unfilled, and this is where most of a phase's window lies.
// H in {32, 64, 128, 256}; any G. Each (row, kv head) pair is one unit of work:
//   scores: the key rows streamed h by h into up to 4 queries' score rows at a
//           time (kept in L1; the keys are read once per 4 queries);
//   softmax: masked, with glibc's vector expf (libmvec);
//   values: streamed slot by slot into register accumulators, a few queries and
//           a block of columns at a time (as many as the vector registers hold),
//           scaled by 1 / sum at the end.
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

// The vector unit: W floats per register, masked loads of the first n lanes, and
// the few operations the kernel needs, for the ISA being compiled.
#if defined(__AVX512F__) && defined(__AVX512BW__)
extern "C" __m512 _ZGVeN16v_expf(__m512);
namespace vec {
constexpr int W = 16;
using V = __m512;
using M = __mmask16;
inline M Tail(int64_t n) { return n >= W ? 0xFFFF : (M)((1u << n) - 1); }
inline V LoadZ(M t, const float* p) { return _mm512_maskz_loadu_ps(t, p); }
inline V Load(const float* p) { return _mm512_loadu_ps(p); }
inline void Store(float* p, V a) { _mm512_storeu_ps(p, a); }
inline V Set1(float f) { return _mm512_set1_ps(f); }
inline V Zero() { return _mm512_setzero_ps(); }
inline V Fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
inline V Mul(V a, V b) { return _mm512_mul_ps(a, b); }
inline V Add(V a, V b) { return _mm512_add_ps(a, b); }
inline V Sub(V a, V b) { return _mm512_sub_ps(a, b); }
inline V Max(V a, V b) { return _mm512_max_ps(a, b); }
inline V Exp(V a) { return _ZGVeN16v_expf(a); }
inline float SumOf(V a) { return _mm512_reduce_add_ps(a); }
inline float MaxOf(V a) { return _mm512_reduce_max_ps(a); }
// Lanes of t whose mask byte is set.
inline M Live(M t, const bool* mask) {
  const __m512i mi = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(t, mask));
  return _mm512_test_epi32_mask(mi, mi) & t;
}
// where m: a, else b.
inline V Where(M m, V a, V b) { return _mm512_mask_blend_ps(m, b, a); }
inline V ZeroOutside(M t, V a) { return _mm512_maskz_mov_ps(t, a); }
// Value blocks: every column, 4 queries (2 at H = 128, 1 at H = 256, where one
// slot's values are read from memory by the multiply-adds).
constexpr int ValueColumns(int H) { return H; }
constexpr int ValueQueries(int H) { return H <= 64 ? 4 : (H == 128 ? 2 : 1); }
}  // namespace vec
#elif defined(__AVX2__) && defined(__FMA__)
extern "C" __m256 _ZGVdN8v_expf(__m256);
namespace vec {
constexpr int W = 8;
using V = __m256;
using M = __m256i;  // all ones in a lane that is in
inline M Tail(int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)std::min<int64_t>(n, W)),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
inline V LoadZ(M t, const float* p) { return _mm256_maskload_ps(p, t); }
inline V Load(const float* p) { return _mm256_loadu_ps(p); }
inline void Store(float* p, V a) { _mm256_storeu_ps(p, a); }
inline V Set1(float f) { return _mm256_set1_ps(f); }
inline V Zero() { return _mm256_setzero_ps(); }
inline V Fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
inline V Mul(V a, V b) { return _mm256_mul_ps(a, b); }
inline V Add(V a, V b) { return _mm256_add_ps(a, b); }
inline V Sub(V a, V b) { return _mm256_sub_ps(a, b); }
inline V Max(V a, V b) { return _mm256_max_ps(a, b); }
inline V Exp(V a) { return _ZGVdN8v_expf(a); }
inline float SumOf(V a) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}
inline float MaxOf(V a) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)));
}
// Lanes of t whose mask byte is set (the bytes past the tail are not read).
inline M Live(M t, const bool* mask) {
  int64_t bytes = 0;
  const int n = _mm_popcnt_u32((unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(t)));
  std::memcpy(&bytes, mask, n);
  const __m256i mi = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(bytes));
  return _mm256_and_si256(t, _mm256_cmpgt_epi32(mi, _mm256_setzero_si256()));
}
inline V Where(M m, V a, V b) { return _mm256_blendv_ps(b, a, _mm256_castsi256_ps(m)); }
inline V ZeroOutside(M t, V a) { return _mm256_and_ps(a, _mm256_castsi256_ps(t)); }
// Value blocks: 32 columns, 2 queries (8 accumulators, 4 value registers).
constexpr int ValueColumns(int H) { return std::min(H, 32); }
constexpr int ValueQueries(int) { return 2; }
}  // namespace vec
#else
#error "decode_kernel.cc needs AVX-512 (F, BW) or AVX2 with FMA"
#endif

namespace ffi = xla::ffi;
namespace {
using vec::M;
using vec::V;
using vec::W;
constexpr float kMask = -1e30f;

// Score rows are kept Stride(S) floats apart, a whole number of vectors, so that
// they are written with whole-vector stores (masked stores are slow on some
// processors: AVX2's vmaskmovps store is microcoded on AMD's Zen).
inline int64_t Stride(int64_t S) { return (S + W - 1) / W * W; }

// The slots [lo, hi) a row reads: from its first live slot, rounded down to a
// multiple of W (whole vectors, as its score row is stored), to one past its
// last; all S where no slot is live.
struct Span {
  int64_t lo, hi;
};
inline Span LiveSpan(const bool* mask, int64_t S) {
  int64_t hi = S;
  while (hi > 0 && !mask[hi - 1]) --hi;
  if (hi == 0) return {0, S};
  int64_t lo = 0;
  while (!mask[lo]) ++lo;
  return {lo / W * W, hi};
}

// Scores of Q queries (rows of q, H apart) into x (rows Stride(S) apart) at slots
// [lo, hi) (lo a multiple of W): the key rows (S apart) are streamed once, h by h,
// each adding q[j][h] * k[h, lo:hi] to the Q score rows. With `nk` and `nv` (the
// next pair's keys and values), also prefetches into L2 per h the next pair's key
// row h over its span `nx` and 1/H of its values over that span.
template <int H, int Q>
inline void ScoreRows(const float* q, const float* k, int64_t S, int64_t lo, int64_t hi,
                      float* x, const float* nk, const float* nv, Span nx) {
  const int64_t vlines = (nx.hi - nx.lo) * H * 4 / 64, per_h = (vlines + H - 1) / H;
  for (int h = 0; h < H; ++h) {
    if (nk != nullptr) {
      const char* kh = reinterpret_cast<const char*>(nk + h * S);
      for (int64_t b = nx.lo * 4; b < nx.hi * 4; b += 64) _mm_prefetch(kh + b, _MM_HINT_T1);
      const char* vs = reinterpret_cast<const char*>(nv + nx.lo * H);
      for (int64_t i = h * per_h; i < std::min(vlines, (h + 1) * per_h); ++i)
        _mm_prefetch(vs + i * 64, _MM_HINT_T1);
    }
    const float* krow = k + h * S;
    const int64_t X = Stride(S);
    V qj[Q];
    for (int j = 0; j < Q; ++j) qj[j] = vec::Set1(q[j * H + h]);
    for (int64_t s0 = lo; s0 < hi; s0 += W) {
      const V kv = s0 + W <= hi ? vec::Load(krow + s0) : vec::LoadZ(vec::Tail(hi - s0), krow + s0);
      for (int j = 0; j < Q; ++j) {
        float* xj = x + j * X + s0;
        const V prev = h == 0 ? vec::Zero() : vec::Load(xj);
        vec::Store(xj, vec::Fma(qj[j], kv, prev));
      }
    }
  }
}

// The next pair's keys `nk` and values `nv` (or null) are prefetched during the
// first pass over the keys.
template <int H>
void Scores(const float* q, int64_t G, const float* k, int64_t S, Span sp, float* x,
            const float* nk, const float* nv, Span nx) {
  const int64_t X = Stride(S);
  int64_t g = 0;
  for (; g + 4 <= G; g += 4, nk = nv = nullptr)
    ScoreRows<H, 4>(q + g * H, k, S, sp.lo, sp.hi, x + g * X, nk, nv, nx);
  switch (G - g) {
    case 3: ScoreRows<H, 3>(q + g * H, k, S, sp.lo, sp.hi, x + g * X, nk, nv, nx); break;
    case 2: ScoreRows<H, 2>(q + g * H, k, S, sp.lo, sp.hi, x + g * X, nk, nv, nx); break;
    case 1: ScoreRows<H, 1>(q + g * H, k, S, sp.lo, sp.hi, x + g * X, nk, nv, nx); break;
    default: break;
  }
}

// Masked, scaled softmax of one score row in place over slots [lo, hi) (lo a
// multiple of W; the lanes past hi end as 0); returns 1 / (sum of its exps).
inline float Softmax(float* x, const bool* mask, int64_t lo, int64_t hi, float scale) {
  const V sc = vec::Set1(scale), neg = vec::Set1(kMask);
  V m = neg;
  for (int64_t s0 = lo; s0 < hi; s0 += W) {
    const M t = vec::Tail(hi - s0);
    // Lanes past the tail are -1e30, like the initial maximum.
    const V a = vec::Where(vec::Live(t, mask + s0), vec::Mul(vec::Load(x + s0), sc), neg);
    m = vec::Max(m, a);
    vec::Store(x + s0, a);
  }
  const V mx = vec::Set1(vec::MaxOf(m));
  V l = vec::Zero();
  for (int64_t s0 = lo; s0 < hi; s0 += W) {
    const M t = vec::Tail(hi - s0);
    const V p = vec::ZeroOutside(t, vec::Exp(vec::Sub(vec::Load(x + s0), mx)));
    l = vec::Add(l, p);
    vec::Store(x + s0, p);
  }
  return 1.0f / vec::SumOf(l);
}

// Columns [c0, c0 + C) of out[j] = inv[j] * sum_{s in sp} p[j][s] v_s for Q queries
// (p rows Stride(S) apart, v and out rows H apart).
template <int H, int C, int Q>
inline void Values(const float* p, const float* v, int64_t S, Span sp, const float* inv,
                   float* out, int c0) {
  constexpr int R = C / W;
  V acc[Q][R];
  for (int j = 0; j < Q; ++j)
    for (int i = 0; i < R; ++i) acc[j][i] = vec::Zero();
  for (int64_t s = sp.lo; s < sp.hi; ++s) {
    V vv[R];
    for (int i = 0; i < R; ++i) vv[i] = vec::Load(v + s * H + c0 + W * i);
    for (int j = 0; j < Q; ++j) {
      const V pj = vec::Set1(p[j * Stride(S) + s]);
      for (int i = 0; i < R; ++i) acc[j][i] = vec::Fma(pj, vv[i], acc[j][i]);
    }
  }
  for (int j = 0; j < Q; ++j) {
    const V c = vec::Set1(inv[j]);
    for (int i = 0; i < R; ++i) vec::Store(out + j * H + c0 + W * i, vec::Mul(acc[j][i], c));
  }
}

// Values are summed in blocks of C columns for kQ queries at a time, sized per ISA
// (`vec::ValueColumns`, `vec::ValueQueries`) so that the accumulators (kQ * C / W
// registers), one slot's values (C / W) and the broadcast weight fit its registers.
template <int H>
struct ValueBlocks {
  static constexpr int C = vec::ValueColumns(H), kQ = vec::ValueQueries(H);
  static_assert(H % C == 0 && C % W == 0);
};

template <int H>
void AllValues(const float* p, int64_t G, const float* v, int64_t S, Span sp, const float* inv,
               float* out) {
  constexpr int C = ValueBlocks<H>::C, kQ = ValueBlocks<H>::kQ;
  for (int64_t g = 0; g < G;) {
    const int64_t n = std::min<int64_t>(kQ, G - g);
    const float *pg = p + g * Stride(S), *ig = inv + g;
    float* og = out + g * H;
    for (int c0 = 0; c0 < H; c0 += C) {
      if (kQ >= 4 && n == 4) Values<H, C, std::min(kQ, 4)>(pg, v, S, sp, ig, og, c0);
      else if (kQ >= 3 && n == 3) Values<H, C, std::min(kQ, 3)>(pg, v, S, sp, ig, og, c0);
      else if (kQ >= 2 && n == 2) Values<H, C, std::min(kQ, 2)>(pg, v, S, sp, ig, og, c0);
      else Values<H, C, 1>(pg, v, S, sp, ig, og, c0);
    }
    g += n;
  }
}

// Pairs [r0, r1) of (row, kv head); x holds G score rows (`Stride`), inv G floats. Each
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
    const Span sp = LiveSpan(mask + (r / K) * S, S);
    const Span nx = more ? LiveSpan(mask + ((r + 1) / K) * S, S) : Span{0, 0};
    Scores<H>(q + r * G * H, G, kr, S, sp, x, more ? kr + H * S : nullptr,
              more ? vr + S * H : nullptr, nx);
    const bool* mr = mask + (r / K) * S;
    for (int64_t g = 0; g < G; ++g) inv[g] = Softmax(x + g * Stride(S), mr, sp.lo, sp.hi, scale);
    AllValues<H>(x, G, vr, S, sp, inv, out + r * G * H);
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
    std::vector<float> x(G * Stride(S)), inv(G);
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
