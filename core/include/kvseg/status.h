/*
 * kvseg/status.h — error codes shared by every libkvseg call.
 *
 * Functions that can fail return a kvs_status: KVS_OK (zero) or a negative
 * code. kvs_strerror() names a code in words; the library never prints.
 */
#ifndef KVSEG_STATUS_H
#define KVSEG_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

/*
 * KVS_API marks the functions of the public API: the only names the shared
 * library exports (its version script is made from these declarations, so
 * the helpers the core's files share stay inside). Every public header
 * includes this one.
 */
#if defined(__GNUC__) || defined(__clang__)
#define KVS_API __attribute__((visibility("default")))
#else
#define KVS_API
#endif

typedef enum kvs_status {
	KVS_OK = 0,
	KVS_E_TRUNCATED = -1, /* a read ran past the end of its payload */
	KVS_E_OVERLONG = -2,  /* a code is longer than any canonical code */
	KVS_E_OVERFLOW = -3,  /* a decoded value does not fit in 64 bits */
	KVS_E_RANGE = -4,     /* an argument is outside its documented range */
	KVS_E_NOSPACE = -5,   /* a caller-provided region is full */
	KVS_E_NOMEM = -6,     /* memory allocation failed */
	KVS_E_CORRUPT = -7,   /* stored data is inconsistent */
	KVS_E_ORDER = -8,     /* input is not in the required order */
	KVS_E_INVAL = -9,     /* an argument is invalid */
	KVS_E_IO = -10,       /* a system call failed (errno in the message) */
	KVS_E_UNSUPPORTED = -11, /* a format version or feature we lack */
	KVS_E_CANCELED = -12, /* the caller canceled the operation */
	KVS_E_CONFLICT = -13, /* the catalog changed under a replace */
	KVS_E_EXISTS = -14,   /* a file is in the way (KVS_WRITER_NO_REPLACE) */
} kvs_status;

/*
 * Calls that can fail for many reasons also fill a kvs_error (when given
 * one): the status and a message naming the problem, for example
 * "header CRC32C mismatch (stored 0x1a2b3c4d, computed 0x...)".
 */
typedef struct kvs_error {
	kvs_status status;
	char message[240];
} kvs_error;

/* Sets err (if not NULL) and returns status. printf-style message. */
KVS_API kvs_status kvs_error_set(kvs_error *err, kvs_status status,
                                 const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* A static, human-readable description of a status code. */
KVS_API const char *kvs_strerror(kvs_status status);

#ifdef __cplusplus
}
#endif

#endif
