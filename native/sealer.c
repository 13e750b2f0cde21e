/*
 * Batch sealer of the snapshot engine: the keyed chunk ids (HMAC-SHA-256) and the AES-256-GCM seal and open of
 * many chunks in one call, with one cipher context and one HMAC context per thread instead of one object per chunk.
 * It writes exactly the bytes crypto.ts writes: the caller lays out each object's prefix and nonce, this fills in
 * the ciphertext and tag. OpenSSL is the node process's own (its symbols resolve at load), so nothing is linked.
 *
 * Context-aware: every thread that loads it gets its own contexts (napi instance data); no global mutable state.
 */
#include <node_api.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/crypto.h>
#include <stdint.h>
#include <string.h>
#include <stdlib.h>

#define KEY_BYTES 32
#define NONCE_BYTES 12
#define TAG_BYTES 16
#define ID_BYTES 32
#define IN_OUT 0xffffffffu

typedef struct {
  EVP_CIPHER_CTX *cipher;
  HMAC_CTX *hmac;
} Instance;

static void free_instance(napi_env env, void *data, void *hint) {
  (void)env;
  (void)hint;
  Instance *instance = data;
  if (instance->cipher) EVP_CIPHER_CTX_free(instance->cipher);
  if (instance->hmac) HMAC_CTX_free(instance->hmac);
  free(instance);
}

static napi_value fail(napi_env env, const char *message) {
  napi_throw_error(env, NULL, message);
  return NULL;
}

/* A Uint8Array (a Buffer, also over a SharedArrayBuffer): its bytes and length. */
static int bytes_of(napi_env env, napi_value value, uint8_t **data, size_t *length) {
  napi_typedarray_type type;
  napi_value buffer;
  size_t offset;
  void *p;
  if (napi_get_typedarray_info(env, value, &type, length, &p, &buffer, &offset) != napi_ok) return 0;
  if (type != napi_uint8_array) return 0;
  *data = p;
  return 1;
}

static int words_of(napi_env env, napi_value value, uint32_t **data, size_t *length) {
  napi_typedarray_type type;
  napi_value buffer;
  size_t offset;
  void *p;
  if (napi_get_typedarray_info(env, value, &type, length, &p, &buffer, &offset) != napi_ok) return 0;
  if (type != napi_uint32_array) return 0;
  *data = p;
  return 1;
}

static int count_of(napi_env env, napi_value value, uint32_t *count) {
  return napi_get_value_uint32(env, value, count) == napi_ok;
}

static Instance *instance_of(napi_env env) {
  Instance *instance = NULL;
  if (napi_get_instance_data(env, (void **)&instance) != napi_ok) return NULL;
  return instance;
}

/* chunkIds(idKey, data, sizes: Uint32Array, count, ids): HMAC-SHA-256 of each chunk of data, cut at sizes, into ids
 * (32 bytes each, in order). */
static napi_value chunk_ids(napi_env env, napi_callback_info info) {
  size_t argc = 5;
  napi_value argv[5];
  uint8_t *key, *data, *ids;
  size_t key_length, data_length, ids_length, sizes_length;
  uint32_t *sizes, count;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc != 5) return fail(env, "chunkIds: 5 arguments");
  if (!bytes_of(env, argv[0], &key, &key_length) || key_length != KEY_BYTES) return fail(env, "chunkIds: key");
  if (!bytes_of(env, argv[1], &data, &data_length)) return fail(env, "chunkIds: data");
  if (!words_of(env, argv[2], &sizes, &sizes_length) || !count_of(env, argv[3], &count) || count > sizes_length)
    return fail(env, "chunkIds: sizes");
  if (!bytes_of(env, argv[4], &ids, &ids_length) || ids_length / ID_BYTES < count) return fail(env, "chunkIds: ids");
  Instance *instance = instance_of(env);
  if (!instance) return fail(env, "chunkIds: no instance");
  size_t offset = 0;
  for (uint32_t i = 0; i < count; i++) {
    if (sizes[i] > data_length - offset) return fail(env, "chunkIds: sizes exceed data");
    offset += sizes[i];
  }
  if (!HMAC_Init_ex(instance->hmac, key, KEY_BYTES, EVP_sha256(), NULL)) return fail(env, "chunkIds: HMAC init");
  offset = 0;
  for (uint32_t i = 0; i < count; i++) {
    unsigned int length = ID_BYTES;
    /* A NULL key restarts with the key already set: no key schedule per chunk. */
    if ((i > 0 && !HMAC_Init_ex(instance->hmac, NULL, 0, NULL, NULL)) ||
        !HMAC_Update(instance->hmac, data + offset, sizes[i]) ||
        !HMAC_Final(instance->hmac, ids + (size_t)i * ID_BYTES, &length) || length != ID_BYTES)
      return fail(env, "chunkIds: HMAC");
    offset += sizes[i];
  }
  return NULL;
}

/* seal(key, source, out, objects: Uint32Array, count): for each object, 4 words (at, aadLength, bodyLength, sourceAt):
 * out[at, at + aadLength) is the additional data, the nonce follows it, then the ciphertext of bodyLength bytes
 * (plaintext taken from source at sourceAt, or from out where the ciphertext goes when sourceAt is 0xffffffff), then
 * the tag. */
static napi_value seal(napi_env env, napi_callback_info info) {
  size_t argc = 5;
  napi_value argv[5];
  uint8_t *key, *source, *out;
  size_t key_length, source_length, out_length, words;
  uint32_t *objects, count;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc != 5) return fail(env, "seal: 5 arguments");
  if (!bytes_of(env, argv[0], &key, &key_length) || key_length != KEY_BYTES) return fail(env, "seal: key");
  if (!bytes_of(env, argv[1], &source, &source_length)) return fail(env, "seal: source");
  if (!bytes_of(env, argv[2], &out, &out_length)) return fail(env, "seal: out");
  if (!words_of(env, argv[3], &objects, &words) || !count_of(env, argv[4], &count) || words / 4 < count)
    return fail(env, "seal: objects");
  Instance *instance = instance_of(env);
  if (!instance) return fail(env, "seal: no instance");
  EVP_CIPHER_CTX *ctx = instance->cipher;
  for (uint32_t i = 0; i < count; i++) {
    const uint32_t *o = objects + (size_t)i * 4;
    uint64_t end = (uint64_t)o[0] + o[1] + NONCE_BYTES + o[2] + TAG_BYTES;
    if (end > out_length) return fail(env, "seal: an object does not fit in out");
    if (o[3] != IN_OUT && (uint64_t)o[3] + o[2] > source_length) return fail(env, "seal: a body is outside source");
  }
  if (!EVP_EncryptInit_ex(ctx, EVP_aes_256_gcm(), NULL, key, NULL)) return fail(env, "seal: cipher init");
  for (uint32_t i = 0; i < count; i++) {
    const uint32_t *o = objects + (size_t)i * 4;
    uint8_t *aad = out + o[0];
    uint8_t *nonce = aad + o[1];
    uint8_t *body = nonce + NONCE_BYTES;
    const uint8_t *plain = o[3] == IN_OUT ? body : source + o[3];
    int length = 0;
    if (!EVP_EncryptInit_ex(ctx, NULL, NULL, NULL, nonce) ||
        (o[1] > 0 && !EVP_EncryptUpdate(ctx, NULL, &length, aad, (int)o[1])) ||
        (o[2] > 0 && !EVP_EncryptUpdate(ctx, body, &length, plain, (int)o[2])) ||
        !EVP_EncryptFinal_ex(ctx, body + o[2], &length) ||
        !EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_GET_TAG, TAG_BYTES, body + o[2]))
      return fail(env, "seal: AES-256-GCM");
  }
  return NULL;
}

/* open(key, sealed, out, objects: Uint32Array, count): for each object, 4 words (at, aadLength, bodyLength, outAt)
 * laid out as seal writes them in sealed; decrypts each body into out at outAt and checks its tag. Returns -1 when
 * every object authenticated, else the index of the first that did not (its output and every earlier one zeroed). */
static napi_value open_objects(napi_env env, napi_callback_info info) {
  size_t argc = 5;
  napi_value argv[5], result;
  uint8_t *key, *sealed, *out;
  size_t key_length, sealed_length, out_length, words;
  uint32_t *objects, count;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc != 5) return fail(env, "open: 5 arguments");
  if (!bytes_of(env, argv[0], &key, &key_length) || key_length != KEY_BYTES) return fail(env, "open: key");
  if (!bytes_of(env, argv[1], &sealed, &sealed_length)) return fail(env, "open: sealed");
  if (!bytes_of(env, argv[2], &out, &out_length)) return fail(env, "open: out");
  if (!words_of(env, argv[3], &objects, &words) || !count_of(env, argv[4], &count) || words / 4 < count)
    return fail(env, "open: objects");
  Instance *instance = instance_of(env);
  if (!instance) return fail(env, "open: no instance");
  EVP_CIPHER_CTX *ctx = instance->cipher;
  for (uint32_t i = 0; i < count; i++) {
    const uint32_t *o = objects + (size_t)i * 4;
    if ((uint64_t)o[0] + o[1] + NONCE_BYTES + o[2] + TAG_BYTES > sealed_length) return fail(env, "open: an object is outside sealed");
    if ((uint64_t)o[3] + o[2] > out_length) return fail(env, "open: a body does not fit in out");
  }
  if (!EVP_DecryptInit_ex(ctx, EVP_aes_256_gcm(), NULL, key, NULL)) return fail(env, "open: cipher init");
  int32_t failed = -1;
  for (uint32_t i = 0; i < count && failed < 0; i++) {
    const uint32_t *o = objects + (size_t)i * 4;
    const uint8_t *aad = sealed + o[0];
    const uint8_t *nonce = aad + o[1];
    const uint8_t *body = nonce + NONCE_BYTES;
    uint8_t tag[TAG_BYTES];
    uint8_t rest[TAG_BYTES];
    int length = 0;
    memcpy(tag, body + o[2], TAG_BYTES);
    if (!EVP_DecryptInit_ex(ctx, NULL, NULL, NULL, nonce) ||
        (o[1] > 0 && !EVP_DecryptUpdate(ctx, NULL, &length, aad, (int)o[1])) ||
        (o[2] > 0 && !EVP_DecryptUpdate(ctx, out + o[3], &length, body, (int)o[2])) ||
        !EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_SET_TAG, TAG_BYTES, tag) ||
        EVP_DecryptFinal_ex(ctx, rest, &length) <= 0)
      failed = (int32_t)i;
  }
  if (failed >= 0) {
    /* Unauthenticated bytes never leave: every output written so far is wiped. */
    for (int32_t i = 0; i <= failed; i++) {
      const uint32_t *o = objects + (size_t)i * 4;
      OPENSSL_cleanse(out + o[3], o[2]);
    }
  }
  if (napi_create_int32(env, failed, &result) != napi_ok) return NULL;
  return result;
}

NAPI_MODULE_INIT() {
  Instance *instance = calloc(1, sizeof(Instance));
  if (!instance) return fail(env, "sealer: out of memory");
  instance->cipher = EVP_CIPHER_CTX_new();
  instance->hmac = HMAC_CTX_new();
  if (!instance->cipher || !instance->hmac || napi_set_instance_data(env, instance, free_instance, NULL) != napi_ok) {
    free_instance(env, instance, NULL);
    return fail(env, "sealer: no OpenSSL context");
  }
  napi_property_descriptor properties[] = {
      {"chunkIds", NULL, chunk_ids, NULL, NULL, NULL, napi_default, NULL},
      {"seal", NULL, seal, NULL, NULL, NULL, napi_default, NULL},
      {"open", NULL, open_objects, NULL, NULL, NULL, napi_default, NULL},
  };
  if (napi_define_properties(env, exports, sizeof(properties) / sizeof(properties[0]), properties) != napi_ok) return NULL;
  return exports;
}
