/*
 * status.c — names for kvs_status codes. The library never prints; callers
 * turn codes into messages with kvs_strerror().
 */
#include "kvseg/status.h"

#include <stdarg.h>
#include <stdio.h>

const char *kvs_strerror(kvs_status status)
{
	switch (status) {
	case KVS_OK:
		return "success";
	case KVS_E_TRUNCATED:
		return "truncated: read past the end of the data";
	case KVS_E_OVERLONG:
		return "overlong or non-canonical code";
	case KVS_E_OVERFLOW:
		return "value does not fit in 64 bits";
	case KVS_E_RANGE:
		return "argument out of range";
	case KVS_E_NOSPACE:
		return "output region is full";
	case KVS_E_NOMEM:
		return "out of memory";
	case KVS_E_CORRUPT:
		return "data is corrupt or inconsistent";
	case KVS_E_ORDER:
		return "input is out of order";
	case KVS_E_INVAL:
		return "invalid argument";
	case KVS_E_IO:
		return "input/output error";
	case KVS_E_UNSUPPORTED:
		return "unsupported format version or feature";
	case KVS_E_CANCELED:
		return "canceled";
	case KVS_E_CONFLICT:
		return "the catalog changed: conflicting update";
	case KVS_E_EXISTS:
		return "a file already exists where the output goes";
	}
	return "unknown status code";
}

kvs_status kvs_error_set(kvs_error *err, kvs_status status, const char *fmt,
                         ...)
{
	if (err) {
		va_list ap;
		va_start(ap, fmt);
		err->status = status;
		vsnprintf(err->message, sizeof err->message, fmt, ap);
		va_end(ap);
	}
	return status;
}
