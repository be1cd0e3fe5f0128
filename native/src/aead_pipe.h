/* A second thread for a big record's AEAD work, so that sealing overlaps sending and opening overlaps receiving.
 *
 * One core seals or opens at ~9 GB/s and copies through a loopback socket at ~6.5 GB/s; one after the other, a
 * sealed 1 MiB copy ran at about half the plain one's rate (bench/results/gpu-2026-12-04f-copies). With the pipe the
 * caller hands it a record's pieces in order (rgpu_aead_pipe_give: rgpu_aead_update of that piece) and, before it
 * sends a sealed piece or ends the record, waits for it (rgpu_aead_pipe_take), doing socket I/O meanwhile. Pieces
 * run in order, one at a time, each claimed by the helper or -- while the helper has not woken yet -- by the
 * caller waiting in give or take, so a caller never idles for a thread that sleeps (a copy every millisecond found
 * the worker's helper asleep each time: the pipe gained nothing on 1 MiB copies until callers took pieces too).
 *
 * One record at a time per process (the client's connection and the worker's session each have one socket): a
 * caller that cannot have the pipe (another thread has it; the thread could not start; RGPU_AEAD_PIPE=0) does the
 * work itself. The thread starts on first use (again in a forked child), blocks every signal but those a fault
 * raises, polls for work a while after each piece and then sleeps. */
#ifndef RGPU_AEAD_PIPE_H
#define RGPU_AEAD_PIPE_H

#include <stddef.h>
#include <stdint.h>

#include "crypto.h"

/* Pieces a caller hands over at a time: more go in as earlier ones are taken. */
#define RGPU_AEAD_PIPE_DEPTH 32
/* The size of a pipe's piece: small enough that the first and the last piece (which nothing overlaps) are short. */
#define RGPU_AEAD_PIPE_PIECE (64u << 10)

struct rgpu_aead_pipe;

/* The pipe, held for one record, or NULL: then the caller does the work itself. */
struct rgpu_aead_pipe *rgpu_aead_pipe_acquire(void);
/* Hands over the next piece (numbered from 0 in this hold): rgpu_aead_update(a, in, len, out); waits first while
 * RGPU_AEAD_PIPE_DEPTH pieces are given and not done. */
void rgpu_aead_pipe_give(struct rgpu_aead_pipe *p, struct rgpu_aead *a, const uint8_t *in, size_t len, uint8_t *out);
/* Waits until every piece numbered below `upto` (at most those given) is done: 0, or -1 if an update of this hold
 * failed. */
int rgpu_aead_pipe_take(struct rgpu_aead_pipe *p, unsigned upto);
/* Runs the next piece on the caller's thread when the pipe is `behind` pieces or more behind (a caller about to
 * wait for the socket helps a helper that is still waking or slower than the socket): 1 if it ran one. */
int rgpu_aead_pipe_help(struct rgpu_aead_pipe *p, unsigned behind);
/* Pieces given and done so far in this hold (done: without waiting). */
unsigned rgpu_aead_pipe_given(const struct rgpu_aead_pipe *p);
unsigned rgpu_aead_pipe_done(const struct rgpu_aead_pipe *p);
/* Waits for every piece given, then lets the pipe go: 0, or -1 if an update of this hold failed. */
int rgpu_aead_pipe_release(struct rgpu_aead_pipe *p);

#endif
