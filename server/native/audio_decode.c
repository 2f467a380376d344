/* Audio decoded as b10621's mtmd decodes it: miniaudio v0.11.25 (vendored from llama.cpp b10621's
 * vendor/miniaudio, public domain / MIT-0), configured with mtmd-helper.cpp's own defines, and
 * audio_helpers::decode_audio_from_buf's calls, in its order: an f32, 1-channel decoder at the target rate, the
 * length in output frames (a resampled one estimated by miniaudio), that many zeroed samples, and one read into
 * them (a short read leaves the zeros in place). Built into a shared object of its own (server/media/miniaudio.py). */
#define MINIAUDIO_IMPLEMENTATION
#define MA_NO_ENCODING /* (mtmd-helper.cpp without MTMD_AUDIO_DEBUG) */
#define MA_NO_DEVICE_IO
#define MA_NO_RESOURCE_MANAGER
#define MA_NO_NODE_GRAPH
#define MA_NO_ENGINE
#define MA_NO_GENERATION
#define MA_API static
#include "miniaudio.h"

#include <limits.h>
#include <stdlib.h>

/* The number of mono f32 samples at `rate` in *out (free with mlxcel_audio_free), or -1 wherever
 * decode_audio_from_buf returns false: miniaudio cannot open the bytes, cannot tell their length, or the read
 * fails (a zero length included: miniaudio refuses a zero-frame read). -2 when the samples cannot be allocated
 * (where b10621's std::vector would throw). */
long mlxcel_audio_decode(const unsigned char *buf, size_t len, int rate, float **out) {
    ma_result result;
    const int channels = 1;
    ma_decoder_config decoder_config = ma_decoder_config_init(ma_format_f32, channels, rate);
    ma_decoder decoder;
    ma_uint64 frame_count;
    ma_uint64 frames_read;
    float *pcm = NULL;

    *out = NULL;
    result = ma_decoder_init_memory(buf, len, &decoder_config, &decoder);
    if (result != MA_SUCCESS) {
        return -1;
    }
    result = ma_decoder_get_length_in_pcm_frames(&decoder, &frame_count);
    if (result != MA_SUCCESS) {
        ma_decoder_uninit(&decoder);
        return -1;
    }
    if (frame_count > 0) { /* std::vector<float>::resize: value-initialised (zeros); an empty one's data() is NULL */
        if (frame_count > (ma_uint64)(((size_t)-1) / sizeof(float)) || frame_count > (ma_uint64)LONG_MAX ||
            (pcm = (float *)calloc((size_t)frame_count, sizeof(float))) == NULL) {
            ma_decoder_uninit(&decoder);
            return -2;
        }
    }
    result = ma_decoder_read_pcm_frames(&decoder, pcm, frame_count, &frames_read);
    if (result != MA_SUCCESS) {
        free(pcm);
        ma_decoder_uninit(&decoder);
        return -1;
    }
    ma_decoder_uninit(&decoder);
    *out = pcm;
    return (long)frame_count;
}

void mlxcel_audio_free(float *samples) { free(samples); }
