/*
 * Faults in a segment's mapping.
 *
 * segfs reads segments through their mappings. A segment file cut short
 * after it was opened (truncated in place by another process) leaves pages
 * of the mapping with no file behind them, and a read of one raises
 * SIGBUS. GUARDED runs `call` with this thread's guard set: such a fault
 * jumps back out of it and runs `on_fault` instead, with guard_fault_addr
 * the address that faulted. Only code that touches a mapping without
 * holding a lock runs guarded; a SIGBUS anywhere else ends the process as
 * it always did.
 *
 * What `call` had done before the fault stays done: memory it allocated
 * and counts it took are not given back. A damaged segment is then
 * refused before any read (slot_damage_at), so this happens a few times at
 * most, not once per request.
 */
#ifndef SEGFS_GUARD_H
#define SEGFS_GUARD_H

#include <setjmp.h>

extern _Thread_local sigjmp_buf *volatile guard_jb;
extern _Thread_local void *volatile guard_fault_addr;

/* Installs the SIGBUS handler; once, before any thread starts. */
int guard_install(void);

/* What a GUARDED call runs is kept out of line (static GUARDED_FN void
 * f(...)): its locals must not live in the frame of sigsetjmp, where
 * they would be indeterminate after the jump. */
#define GUARDED_FN __attribute__((noinline))

#define GUARDED(on_fault, call)                                                \
	do {                                                                   \
		sigjmp_buf guard_here_;                                        \
		sigjmp_buf *guard_prev_ = guard_jb;                            \
		if (sigsetjmp(guard_here_, 0) == 0) {                          \
			guard_jb = &guard_here_;                               \
			call;                                                  \
			guard_jb = guard_prev_;                                \
		} else {                                                       \
			guard_jb = guard_prev_;                                \
			on_fault;                                              \
		}                                                              \
	} while (0)

#endif
