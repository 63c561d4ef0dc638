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
} kvs_status;

/* A static, human-readable description of a status code. */
const char *kvs_strerror(kvs_status status);

#ifdef __cplusplus
}
#endif

#endif
