/*
 * kvseg/cpu.h — run-time choice of instruction sets for hot loops.
 *
 * The default build targets baseline x86-64 (no -march=native). A function
 * that runs a hot decode loop over the inline codec paths can be marked
 * KVS_MULTIVERSION: the compiler then builds it twice, for baseline x86-64
 * and for x86-64-v3 (BMI2 shifts, LZCNT, POPCNT), and the loader picks the
 * variant this CPU supports. Elsewhere it expands to nothing, and so it
 * does under ThreadSanitizer: the loader runs the variant's resolver (an
 * ifunc) before the sanitizer's runtime is up, and its instrumented code
 * crashed every program linked with libkvseg at startup.
 */
#ifndef KVSEG_CPU_H
#define KVSEG_CPU_H

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) &&         \
    defined(__gnu_linux__) && !defined(__SANITIZE_THREAD__)
#define KVS_MULTIVERSION                                                       \
	__attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define KVS_MULTIVERSION
#endif

#endif
