/* Whisper log-mel spectrogram chunks, value for value as b10621's mtmd computes them
 * (tools/mtmd/mtmd-audio.cpp: mtmd_audio_preprocessor_whisper, used for ULTRAVOX, QWEN2A/QWEN25O, VOXTRAL, GLMA,
 * MERALION and MUSIC_FLAMINGO projectors). Our own code, written from that description:
 *
 *   1. tables: sin/cos of 2*pi*i/n_fft (double angle, rounded to float, sinf/cosf); a periodic Hann window
 *      0.5*(1 - cosf(2*pi*i/window_len)) in double, stored as float; a Slaney-scale, Slaney-area-normalised mel
 *      filter bank (librosa's default, fmin 0, fmax sample_rate/2) computed in double, stored as float. Nothing
 *      is read from the GGUF but n_mel.
 *   2. padding: short audio is zero-extended to n_fft/2 + 1 samples; then 200 (frame/2) samples reflected at the
 *      start (x[200] .. x[1]), the audio, and 30 s of zeros plus 2*200 more zeros at the end (no end reflection).
 *   3. frames: n_len = (padded - frame) / hop + 1, frame = 2*(n_fft/2); each frame windowed (float), transformed
 *      by mtmd's radix-2 FFT whose odd-length leaves are plain DFTs (400 -> 200 -> 100 -> 50 -> 25-point DFTs),
 *      power |X|^2 in float, mel = sum over bins in double of float groups of four float products, floored at
 *      2^-24, log10 in double, stored as float.
 *   4. normalisation over the whole padded spectrogram: max - 8 as the floor (the float stores the double), then
 *      (v + 4) / 4 in double, stored as float.
 *   5. chunks: every full run of 3000 frames, mel-major (n_mel rows of 3000 frames); the short remainder is
 *      dropped. The frames' count per chunk and the 30 s of padding are constants in b10621, not the model's
 *      audio_chunk_len.
 *
 * Every operation keeps b10621's precision (float or double) and order: build without -ffast-math and with
 * -ffp-contract=off (b10621's x86-64 build has no FMA to contract into). b10621 spreads the frames over 4 threads;
 * each frame is computed alone, so the thread count changes nothing. The only outside code is libm (sinf, cosf,
 * log, exp, log10). */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

typedef struct {
    int n_fft;      /* sin/cos table length (the model's n_fft) */
    int frame;      /* FFT length: 2 * (n_fft / 2) */
    int n_bins;     /* frame / 2 + 1 */
    int n_mel;
    float *sin_vals, *cos_vals; /* n_fft each */
    float *window;  /* frame: the Hann window, centred and zero-padded when shorter */
    float *filters; /* n_mel x n_bins */
} mel_tables;

static double max_d(double a, double b) { return a < b ? b : a; } /* std::max(a, b) */

/* Slaney mel scale: linear below 1 kHz, logarithmic above (librosa's htk=False). */
static const double MIN_LOG_HZ = 1000.0;
static const double LIN_SLOPE = 3 / 200.;

static double hz_to_mel(double f_hz) {
    const double min_log_mel = MIN_LOG_HZ * LIN_SLOPE;
    const double log_step = log(6.4) / 27.0;
    return (f_hz < MIN_LOG_HZ) ? f_hz * LIN_SLOPE : min_log_mel + log(f_hz / MIN_LOG_HZ) / log_step;
}

static double mel_to_hz(double m) {
    const double min_log_mel = MIN_LOG_HZ * LIN_SLOPE;
    const double log_step = log(6.4) / 27.0;
    return (m < min_log_mel) ? m / LIN_SLOPE : MIN_LOG_HZ * exp((m - min_log_mel) * log_step);
}

/* Triangular filters on n_mel + 2 mel-spaced edges between fmin = 0 and fmax = sample_rate / 2 (a float),
 * each scaled by 2 / (right - left) (Slaney area normalisation). */
static void fill_filters(float *out, int n_mel, int n_fft, int sample_rate) {
    const float fmin = 0.0f;
    const float fmax = 0.5f * sample_rate;
    const double bin_hz_step = (double)sample_rate / (double)n_fft;
    const int n_bins = n_fft / 2 + 1;
    const double m_lo = hz_to_mel(fmin);
    const double m_hi = hz_to_mel(fmax);
    double *hz = malloc(sizeof(double) * (size_t)(n_mel + 2));
    for (int i = 0; i < n_mel + 2; i++)
        hz[i] = mel_to_hz(m_lo + (m_hi - m_lo) * ((double)i / (double)(n_mel + 1)));
    for (int m = 0; m < n_mel; m++) {
        const double left = hz[m], centre = hz[m + 1], right = hz[m + 2];
        const double denom_l = max_d(1e-30, centre - left);
        const double denom_r = max_d(1e-30, right - centre);
        const double enorm = 2.0 / max_d(1e-30, right - left);
        for (int k = 0; k < n_bins; k++) {
            const double f = k * bin_hz_step;
            double w = 0.0;
            if (f >= left && f <= centre)
                w = (f - left) / denom_l;
            else if (f > centre && f <= right)
                w = (right - f) / denom_r;
            out[(size_t)m * n_bins + k] = (float)(w * enorm * (double)1.0f);
        }
    }
    free(hz);
}

static int tables_init(mel_tables *t, int n_mel, int n_fft, int window_len, int sample_rate) {
    memset(t, 0, sizeof(*t));
    t->n_fft = n_fft;
    t->frame = 2 * (n_fft / 2);
    t->n_bins = n_fft / 2 + 1;
    t->n_mel = n_mel;
    t->sin_vals = malloc(sizeof(float) * (size_t)n_fft);
    t->cos_vals = malloc(sizeof(float) * (size_t)n_fft);
    t->window = calloc((size_t)(t->frame > window_len ? t->frame : window_len), sizeof(float));
    t->filters = malloc(sizeof(float) * (size_t)n_mel * (size_t)t->n_bins);
    if (!t->sin_vals || !t->cos_vals || !t->window || !t->filters)
        return -1;
    for (uint32_t i = 0; i < (uint32_t)n_fft; i++) {
        double theta = (2 * M_PI * i) / (uint32_t)n_fft;
        t->sin_vals[i] = sinf((float)theta);
        t->cos_vals[i] = cosf((float)theta);
    }
    /* periodic Hann (divides by the length), placed in the middle of the frame when shorter than it */
    const int pad = window_len < t->frame ? (t->frame - window_len) / 2 : 0;
    for (uint32_t i = 0; i < (uint32_t)window_len; i++)
        t->window[pad + i] = (float)(0.5 * (1.0 - cosf((float)((2.0 * M_PI * i) / (uint32_t)window_len))));
    fill_filters(t->filters, n_mel, n_fft, sample_rate);
    return 0;
}

static void tables_free(mel_tables *t) {
    free(t->sin_vals);
    free(t->cos_vals);
    free(t->window);
    free(t->filters);
}

/* Plain DFT of n real samples (the odd-length leaves of the FFT): out holds n interleaved (re, im) pairs; the
 * twiddle for k*j is table entry (k*j*step) mod n_fft, each sum accumulated in float in j order. */
static void dft_real(const mel_tables *t, const float *in, int n, float *out) {
    const int step = t->n_fft / n;
    for (int k = 0; k < n; k++) {
        float re = 0, im = 0;
        for (int j = 0; j < n; j++) {
            const int idx = (k * j * step) % t->n_fft;
            const float x = in[j];
            re += x * t->cos_vals[idx];
            im += (-1.0f * x) * t->sin_vals[idx];
        }
        out[2 * k + 0] = re;
        out[2 * k + 1] = im;
    }
}

/* mtmd's recursive radix-2 FFT of n real samples into n (re, im) pairs. `in` holds n samples and n more of
 * scratch (the halves are gathered there, the even half first); `out` holds 2n results and the halves'
 * transforms above them (the even half's at out + 2n, the odd half's at out + 3n). */
static void fft_real(const mel_tables *t, float *in, int n, float *out) {
    if (n == 1) {
        out[0] = in[0];
        out[1] = 0.0f;
        return;
    }
    const int half = n / 2;
    if (n - half * 2 == 1) {
        dft_real(t, in, n, out);
        return;
    }
    float *part = in + n;
    float *even_fft = out + 2 * n;
    float *odd_fft = even_fft + n;
    for (int i = 0; i < half; i++)
        part[i] = in[2 * i];
    fft_real(t, part, half, even_fft);
    for (int i = 0; i < half; i++)
        part[i] = in[2 * i + 1];
    fft_real(t, part, half, odd_fft);

    const int step = t->n_fft / n;
    for (int k = 0; k < half; k++) {
        const float wr = t->cos_vals[k * step];
        const float wi = -1.0f * t->sin_vals[k * step];
        const float re_odd = odd_fft[2 * k + 0], im_odd = odd_fft[2 * k + 1];
        out[2 * k + 0] = even_fft[2 * k + 0] + wr * re_odd - wi * im_odd;
        out[2 * k + 1] = even_fft[2 * k + 1] + wr * im_odd + wi * re_odd;
        out[2 * (k + half) + 0] = even_fft[2 * k + 0] - wr * re_odd + wi * im_odd;
        out[2 * (k + half) + 1] = even_fft[2 * k + 1] - wr * im_odd - wi * re_odd;
    }
}

typedef struct {
    const mel_tables *t;
    const float *padded; /* the padded samples */
    int hop;
    int64_t n_len; /* frames */
    float *mel;    /* n_mel x n_len, mel-major */
    int first, stride;
    int failed;
} frame_job;

/* log10 mel energies of frames first, first + stride, ... (b10621's worker threads take every n_threads-th). */
static void *frame_worker(void *arg) {
    frame_job *job = arg;
    const mel_tables *t = job->t;
    const int frame = t->frame, n_bins = t->n_bins;
    float *fft_in = calloc((size_t)frame * 2, sizeof(float));
    float *fft_out = calloc((size_t)frame * 8, sizeof(float));
    if (!fft_in || !fft_out) {
        job->failed = 1;
        free(fft_in);
        free(fft_out);
        return NULL;
    }
    const double floor_ = (double)5.960464477539063e-08f; /* mel_floor: 2^-24 */
    /* every frame lies inside the padded buffer (its last one ends 30 s of zeros before the buffer's end), so
     * b10621's partial-frame zero fill and its log10(1e-10) tail for frames past the samples never happen */
    for (int64_t i = job->first; i < job->n_len; i += job->stride) {
        const float *x = job->padded + i * job->hop;
        for (int j = 0; j < frame; j++)
            fft_in[j] = t->window[j] * x[j];
        fft_real(t, fft_in, frame, fft_out);
        for (int j = 0; j < n_bins; j++) /* power, in place (bin j is read at 2j, 2j+1 before j is written) */
            fft_out[j] = fft_out[2 * j + 0] * fft_out[2 * j + 0] + fft_out[2 * j + 1] * fft_out[2 * j + 1];
        for (int m = 0; m < t->n_mel; m++) {
            const float *f = t->filters + (size_t)m * n_bins;
            double sum = 0.0;
            int k = 0;
            for (; k < n_bins - 3; k += 4) /* four float products summed in float, then added in double */
                sum += fft_out[k + 0] * f[k + 0] + fft_out[k + 1] * f[k + 1] + fft_out[k + 2] * f[k + 2] +
                       fft_out[k + 3] * f[k + 3];
            for (; k < n_bins; k++)
                sum += fft_out[k] * f[k];
            sum = max_d(sum, floor_);
            job->mel[(size_t)m * job->n_len + i] = (float)log10(sum);
        }
    }
    free(fft_in);
    free(fft_out);
    return NULL;
}

/* Frames of the whole padded spectrogram (before chunking) for n_samples of PCM. */
static int64_t full_frames(int64_t n_samples, int n_fft, int hop, int sample_rate, int pad_seconds) {
    if (n_samples < n_fft / 2 + 1)
        n_samples = n_fft / 2 + 1;
    const int64_t frame = 2 * (n_fft / 2);
    const int64_t padded = n_samples + (int64_t)sample_rate * pad_seconds + frame;
    return (padded - frame) / hop + 1;
}

/* How many chunks mlxcel_whisper_mel writes: every full run of frames_per_chunk frames. 0 for no audio. */
int64_t mlxcel_whisper_mel_chunks(int64_t n_samples, int n_fft, int hop, int sample_rate, int pad_seconds,
                                  int frames_per_chunk) {
    if (n_samples <= 0 || n_fft < 2 || hop <= 0 || frames_per_chunk <= 0)
        return 0;
    return full_frames(n_samples, n_fft, hop, sample_rate, pad_seconds) / frames_per_chunk;
}

/* The whisper log-mel of n_samples of mono float PCM into out: mlxcel_whisper_mel_chunks(...) chunks one after
 * another, each n_mel rows (mel bins) of frames_per_chunk floats (frames in time order). b10621 uses n_fft 400,
 * window_len 400, hop 160, sample_rate 16000, pad_seconds 30, frames_per_chunk 3000. n_threads splits the frames
 * only (any count gives the same values). 0 on success, -1 on bad arguments or no memory. */
int mlxcel_whisper_mel(const float *pcm, int64_t n_samples, int n_mel, int n_fft, int window_len, int hop,
                       int sample_rate, int pad_seconds, int frames_per_chunk, int n_threads, float *out) {
    if (!pcm || n_samples <= 0 || n_mel <= 0 || n_fft < 2 || window_len <= 0 || hop <= 0 || sample_rate <= 0 ||
        pad_seconds < 0 || frames_per_chunk <= 0 || !out)
        return -1;
    if (n_threads < 1)
        n_threads = 1;
    const int frame = 2 * (n_fft / 2);
    const int reflect = frame / 2;
    const int64_t n_in = n_samples < n_fft / 2 + 1 ? n_fft / 2 + 1 : n_samples; /* short audio: zeros after */
    if (n_in < reflect + 1)
        return -1; /* (cannot happen: n_fft / 2 + 1 > frame / 2) */
    const int64_t n_padded = n_in + (int64_t)sample_rate * pad_seconds + 2 * (int64_t)reflect;
    const int64_t n_len = (n_padded - frame) / hop + 1;
    const int64_t n_chunks = n_len / frames_per_chunk;

    mel_tables t;
    float *padded = calloc((size_t)n_padded, sizeof(float));
    float *mel = malloc(sizeof(float) * (size_t)n_mel * (size_t)n_len);
    int rc = -1;
    if (tables_init(&t, n_mel, n_fft, window_len, sample_rate) != 0 || !padded || !mel)
        goto done;

    /* x[reflect] .. x[1], then x, then zeros (the zero-extension of short audio included) */
    for (int i = 0; i < reflect; i++)
        padded[i] = reflect - i < n_samples ? pcm[reflect - i] : 0.0f;
    memcpy(padded + reflect, pcm, sizeof(float) * (size_t)n_samples);

    frame_job jobs[64];
    pthread_t threads[64];
    if (n_threads > 64)
        n_threads = 64;
    if (n_threads > n_len)
        n_threads = (int)n_len;
    for (int w = 0; w < n_threads; w++)
        jobs[w] = (frame_job){&t, padded, hop, n_len, mel, w, n_threads, 0};
    int started = 0;
    for (int w = 1; w < n_threads; w++, started++)
        if (pthread_create(&threads[w], NULL, frame_worker, &jobs[w]) != 0)
            break;
    frame_worker(&jobs[0]);
    for (int w = 1; w <= started; w++)
        pthread_join(threads[w], NULL);
    for (int w = started + 1; w < n_threads; w++) /* threads that could not start: their frames here */
        frame_worker(&jobs[w]);
    for (int w = 0; w < n_threads; w++)
        if (jobs[w].failed)
            goto done;

    /* floor at (max - 8), then (v + 4) / 4, over every frame (those dropped with the last partial chunk too) */
    const size_t n_values = (size_t)n_mel * (size_t)n_len;
    double mmax = -1e20;
    for (size_t i = 0; i < n_values; i++)
        if (mel[i] > mmax)
            mmax = mel[i];
    mmax -= 8.0;
    for (size_t i = 0; i < n_values; i++) {
        if (mel[i] < mmax)
            mel[i] = (float)mmax;
        mel[i] = (float)((mel[i] + 4.0) / 4.0);
    }

    for (int64_t c = 0; c < n_chunks; c++)
        for (int m = 0; m < n_mel; m++)
            memcpy(out + ((size_t)c * n_mel + m) * frames_per_chunk, mel + (size_t)m * n_len + c * frames_per_chunk,
                   sizeof(float) * (size_t)frames_per_chunk);
    rc = 0;
done:
    tables_free(&t);
    free(padded);
    free(mel);
    return rc;
}
