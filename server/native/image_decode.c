/* Images decoded as b10621's mtmd decodes them: stb_image v2.30 (vendored from llama.cpp b10621's vendor/stb,
 * public domain / MIT), its defaults, 3 channels asked (mtmd-helper.cpp's stbi_load_from_memory). Built into a
 * shared object of its own (server/media/stb.py), so the CPU kernels never depend on it. */
#define STB_IMAGE_IMPLEMENTATION
#include "stb_image.h"

/* RGB rows (width x height x 3 bytes, free with mlxcel_image_free), or NULL when stb cannot read the bytes. */
unsigned char *mlxcel_image_decode(const unsigned char *data, int len, int *width, int *height) {
    int channels = 0;
    return stbi_load_from_memory(data, len, width, height, &channels, 3);
}

void mlxcel_image_free(unsigned char *pixels) { stbi_image_free(pixels); }
