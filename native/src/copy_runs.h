/* Copies coded as runs of 8-byte words (MEMCPY_HTOD_RUNS; the format: src/rgpu/protocol/runs.py and
 * docs/protocol.md, "Coded copies"). Sans-IO: the C stand-ins code with it (memory.c), the worker's fast lane
 * decodes with it (lane/lane.c). */
#ifndef RGPU_COPY_RUNS_H
#define RGPU_COPY_RUNS_H

#include <stddef.h>
#include <stdint.h>

/* src[0, n) coded into out[0, cap); returns the coded length, or 0 where it would not fit in cap, where the
 * bytes look like they will not code (after each doubling of what was read from 16 KiB on, more than half of
 * it literal), or where n is over RGPU_RUNS_MAX_COPY_BYTES. */
size_t rgpu_runs_encode(const uint8_t *src, size_t n, uint8_t *out, size_t cap);

/* coded[0, len) decoded into out[0, n); 0, or -1 where the coding does not stand for exactly n bytes, or n is not
 * 1..RGPU_RUNS_MAX_COPY_BYTES, or len is over RGPU_RUNS_MAX_CODED_BYTES (out may then hold anything). Every count is
 * checked against what is left on both sides before it is used. */
int rgpu_runs_decode(const uint8_t *coded, size_t len, uint8_t *out, size_t n);

/* A plan for filling the destination on the device instead (the worker's rgpu_runs_fill kernel,
 * rgpu/backends/runs_fill.py): entries of RGPU_RUNS_FILL_ENTRY bytes -- first:u64 step:u64 source:u64 word:u32
 * words:u32, little-endian -- each `words` <= RGPU_RUNS_FILL_WORDS words from destination word `word` on: a run's
 * (first + k * step) where source is 0, else the 8-byte words at address `source`, which the plan places after the
 * entries (the address is out's own: page-locked memory the device reads at the same address). For n a multiple
 * of 8 only. rgpu_runs_plan_size checks the coding as rgpu_runs_decode does (-1 where it would refuse it) and
 * gives the entries and the bytes the plan takes; rgpu_runs_plan writes it to out (8-byte aligned, `bytes` long:
 * it writes nothing past them, and -1 where the plan is not exactly those entries and bytes). */
#define RGPU_RUNS_FILL_ENTRY 32
#define RGPU_RUNS_FILL_WORDS 4096
int rgpu_runs_plan_size(const uint8_t *coded, size_t len, size_t n, size_t *entries, size_t *bytes);
int rgpu_runs_plan(const uint8_t *coded, size_t len, size_t n, uint8_t *out, size_t entries, size_t bytes);

#endif
