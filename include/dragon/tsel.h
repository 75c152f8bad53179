/* tsel.h: TSEL, the typed schedule edit language (spec: TSEL.md; the
 * project's own choices: docs/tsel.md).
 *
 * A TSEL document is one schedule of one kernel as an optimization graph:
 * edits t1..tn (each one or a few trace instructions, with typed operands
 * that name earlier edits' outputs), `why` lines linked to edits and
 * `expect` lines about the whole schedule. lift turns a trace into a graph,
 * lower turns a graph back into the exact trace; the printer gives one
 * canonical spelling, the parser reads it back with `line:col: message`
 * errors, the checker types every operand (and, given the kernel, checks
 * extents, buffer indices, thread limits and scopes before anything runs),
 * and explain writes why/expect lines from compiler-derived numbers.
 *
 * Guarantees (tests/test_tsel.c): lower(lift(T)) == T for every trace;
 * lift(lower(G)) == G for every canonical G; every instruction kind has a
 * form (`raw`), so nothing is lost on import. Constrained decoding
 * (tests/test_tsel_prefix.c): a prefix checker and a token mask under
 * which every text the model completes parses and checks.
 */
#ifndef DRAGON_TSEL_H
#define DRAGON_TSEL_H

#include "dragon/sched.h"
#include "dragon/tokenizer.h"

typedef struct tsel_graph tsel_graph;

/* ---- text ------------------------------------------------------------------ */

/* Parses a document. Errors are "FILE:line:col: message" (filename NULL:
 * "line:col: message"). Parsing checks the lexical form only; tsel_check
 * does the rest. */
tsel_graph *tsel_parse(const char *text, const char *filename, dg_status *st);
/* The canonical text (caller frees). print(parse(x)) == x for every x that
 * parses. */
char *tsel_print(const tsel_graph *g);
void tsel_graph_free(tsel_graph *g);
/* The SPEC of the header line `tsel 1 kernel SPEC`. */
const char *tsel_graph_kernel(const tsel_graph *g);
int tsel_graph_edit_count(const tsel_graph *g);
/* The edit whose written factors decide the threads of the graph's
 * blocks: the latest tile, split, thread_split or sample_tile among the
 * edits that the loops bound to threadIdx come from (through fuse,
 * fuse_bind and tiles of tiles); 0 where none is (src/tsel/blame.c). */
int tsel_thread_decision(const tsel_graph *g);
/* The latest edit with written factors (tile, split, thread_split,
 * sample_tile): what a kernel's size on the device (its shared memory, its
 * threads) was last chosen by; 0 where none is. */
int tsel_last_decision(const tsel_graph *g);
/* The `tile` whose inner extent (the product of its factors after the
 * first: what one iteration of its outermost loop covers) is the largest,
 * the latest of equals, with that extent in *inner; 0 where no tile's is
 * above 1. What a buffer staged in shared memory grows with. */
int tsel_widest_tile(const tsel_graph *g, int64_t *inner);
/* Where a build needs `bytes` of shared memory past `limit`: the widest
 * tile whose inner extent, capped to shrink it by limit / bytes (into
 * *cap, at least 1), still holds its thread factor, the latest of equals
 * (capping the tile that holds a block's threads below them would leave
 * the block too few); else the widest tile with its cap; 0 where no tile
 * has an inner extent above 1. */
int tsel_shared_blame(const tsel_graph *g, int64_t bytes, int64_t limit, int64_t *cap);
/* Where RewriteCooperativeFetch finds a copy annotated for a cooperative
 * fetch gone: the latest inline or reverse_inline of a handle that a
 * `coop` (or an annotate of its key) named; 0 where none is. */
int tsel_copy_gone_blame(const tsel_graph *g);
/* Which factor of tile edit `tile` (from 0) makes loops bound to
 * threadIdx, with its value in *value; -1 where none does. */
int tsel_thread_factor(const tsel_graph *g, int tile, int64_t *value);
/* Removes every why and expect line (comments and edits stay). */
void tsel_graph_strip_explanations(tsel_graph *g);

/* ---- measured records ---------------------------------------------------- */

/* What a tuning record says about one schedule: its latency and that of the
 * unscheduled kernel, in seconds (either may be missing). */
typedef struct {
  bool has_latency;
  double latency_s;
  bool has_base;
  double base_latency_s;
} tsel_record;

/* Reads a record: a JSON object with "run_secs" (a number or a list, whose
 * median is taken) or "latency_s", and "unscheduled_secs" (number or list)
 * or "unscheduled_latency_s". Other keys are ignored. */
bool tsel_record_parse(const char *json, tsel_record *out, dg_status *st);

/* ---- lift and lower ---------------------------------------------------------- */

/* `postproc default` stands for what the default CUDA postprocessors record
 * on the graph's kernel. Those belong to the search (search_postproc_cuda),
 * a stage above this one, so the program hands them in once at start-up:
 * until then lift folds nothing (the postprocessing tail stays spelled
 * out, still lossless) and lower refuses `postproc default`, saying so.
 * fn runs EnterPostproc and the postprocessors on s; it must be
 * thread-safe. */
typedef bool (*tsel_postproc_fn)(sched *s, void *ctx, dg_status *st);
void tsel_set_postprocessor(tsel_postproc_fn fn, void *ctx);

/* Trace -> canonical graph whose header names kernel_spec. With a kernel,
 * why/expect lines are added (tsel_explain; rec may be NULL). Fails only
 * for traces whose handles are not serial in order of definition or are
 * used before they are defined (sched_trace_from_json never gives those). */
tsel_graph *tsel_lift(const sched_trace *t, const char *kernel_spec, const dg_func *kernel,
                      const tsel_record *rec, dg_status *st);
/* Graph -> trace. Runs the kernel-free checks first (tsel_check with no
 * kernel); errors are located. */
sched_trace *tsel_lower(const tsel_graph *g, dg_status *st);

/* ---- checking -------------------------------------------------------------- */

typedef enum {
  TSEL_TARGET_CUDA, /* every scope, thread bindings */
  TSEL_TARGET_CPU,  /* global and local scopes only */
} tsel_target;

/* Types every operand of every edit, def-before-use in replay order, stale
 * handles, arity, literal types, why/expect links. With a kernel also: tile
 * products equal loop extents, buffer indices exist, thread extents within
 * limits, scopes valid for the target. Returns false with the first error
 * as "FILE:line:col: tN OP: message". */
bool tsel_check(const tsel_graph *g, const dg_func *kernel, tsel_target target, dg_status *st);

/* ---- explanations ---------------------------------------------------------- */

/* Replaces g's why/expect lines with ones generated from facts computed on
 * the kernel (tile factors and products, threads per block, shared-memory
 * bytes of staged tiles, vector widths, unroll steps) and, with a record,
 * the measured latency and speedup. Deterministic for a graph, kernel and
 * record. Fails only if g does not check against the kernel. */
bool tsel_explain(tsel_graph *g, const dg_func *kernel, const tsel_record *rec, dg_status *st);

/* ---- TVM's Python form ------------------------------------------------------- */

/* The trace as TVM's Trace.as_python prints it (`l2, l3 = sch.split(...)`),
 * one statement a line; for size comparisons. Caller frees. */
char *tsel_trace_to_python(const sched_trace *t);

/* ---- constrained decoding (prefix.c, mask.c; the decoding itself: train.h) -- */

/* The model writes a graph for one kernel under a mask: every output
 * parses and checks against the kernel (tsel_parse + tsel_check). What is
 * forced, masked and left to the gates: docs/tsel.md "Constrained
 * decoding". */

/* An incremental prefix checker over the text of one graph: it refuses the
 * first byte after which no complete graph that parses and checks exists.
 * It reads the language the model writes: the header, edits `tN OP ...` in
 * canonical spelling up to one postproc edit (`postproc default` last, or
 * a bare `postproc` and more edits), then why and expect lines (no
 * comments, no raw edits). Not thread-safe. */
typedef struct tsel_prefix tsel_prefix;

/* A checker at the start of a graph whose header names spec. The kernel
 * must outlive the checker. */
tsel_prefix *tsel_prefix_new(const dg_func *kernel, const char *spec, tsel_target target, dg_status *st);
void tsel_prefix_free(tsel_prefix *p);
/* Whether why and expect lines may follow the edits (default true; with
 * false the graph is complete right after the postproc edit). Set before
 * feeding; shared with saved copies. */
void tsel_prefix_set_explain(tsel_prefix *p, bool allow);
/* Whether one `expect` line, the schedule's plan, may come right after
 * the header, before the first edit (default false: the first edit comes
 * there, and its `tN ` is forced). The grammar allows it anywhere; a model
 * trained with the plan first (train_config.plan_first) writes it there.
 * Set before feeding; shared with saved copies. */
void tsel_prefix_set_plan(tsel_prefix *p, bool allow);
/* Narrowings the line guard asks for (train_decode_opts.guard) on a
 * `tile` it blames: cap > 0, the first factor leaves at most cap to the
 * rest (the tile's inner extent, its loop's extent over the first factor:
 * shared memory past the limit); hi > 0, factor number `factor` (from 0,
 * two factors or more after it) is within [lo, hi] (a block's threads out
 * of bounds), the factors before it leaving a divisor there. */
typedef struct {
  int64_t cap;
  int factor;
  int64_t lo, hi;
} tsel_tile_narrowing;
/* Where a block runs on `threads` threads outside its bounds [lo, hi]:
 * the latest tile whose thread factor can be written again to bring the
 * block in, the others kept (its extent has a divisor in the range that
 * does), with that factor and range in *narrow (src/tsel/blame.c); where
 * no one tile can, the latest thread tile that can with the thread tiles
 * after it written again (each up to its extent), the range its factor
 * needs for them to have a way in; 0 where none can (a tile of extent 1
 * never can: blaming it would have it written as it was). */
int tsel_thread_blame(const tsel_graph *g, int64_t threads, int64_t lo, int64_t hi, tsel_tile_narrowing *narrow);
/* Edit number `edit` is read under n (NULL lifts its narrowings; a second
 * cap keeps the smaller, a second range replaces the first);
 * unnarrow_after lifts those of the edits after `edit`. Shared with saved
 * copies. */
void tsel_prefix_narrow_tile(tsel_prefix *p, int edit, const tsel_tile_narrowing *n);
void tsel_prefix_unnarrow_after(tsel_prefix *p, int edit);
/* Reads bytes. False when they cannot continue any such graph; the state
 * is then unchanged. */
bool tsel_prefix_feed(tsel_prefix *p, const char *bytes, size_t n);
/* A graph may end here (at a line start after the postproc edit). */
bool tsel_prefix_complete(const tsel_prefix *p);
/* What must come next and is not the model's to write: the rest of the
 * header `tsel 1 kernel SPEC\n` at the start, the rest of `tN ` at the
 * start of an edit line, else "". Valid until the next feed. */
const char *tsel_prefix_forced(const tsel_prefix *p);
/* The text read so far (NUL-terminated; valid until the next call). */
const char *tsel_prefix_text(const tsel_prefix *p, size_t *len);
/* Edits read so far. */
int tsel_prefix_edit_count(const tsel_prefix *p);
/* The header and the complete edit lines read so far (a graph that
 * parses and checks; valid while the checker lives), and whether one of
 * them is the `postproc` edit (the schedule's edits are then written). */
const char *tsel_prefix_committed(const tsel_prefix *p, size_t *len);
bool tsel_prefix_postprocessed(const tsel_prefix *p);
/* A copy of the checker in its state (free it with tsel_prefix_free), and
 * the way back to it: cheap, they share what was computed. */
tsel_prefix *tsel_prefix_save(const tsel_prefix *p);
void tsel_prefix_restore(tsel_prefix *p, const tsel_prefix *saved);
/* Appends to out a text that completes the graph from here (short, not
 * the shortest); the state is unchanged. False only on an internal
 * failure. */
bool tsel_prefix_completion(tsel_prefix *p, dg_str *out);

/* The token mask: the vocabulary of a tokenizer as a byte trie. */
typedef struct tsel_mask tsel_mask;
tsel_mask *tsel_mask_new(const tok_tokenizer *tok, dg_status *st);
void tsel_mask_free(tsel_mask *m);
int tsel_mask_vocab_size(const tsel_mask *m);
/* allowed[0..V) = 1 for every token whose bytes the checker accepts next
 * (specials: only <|end|>, where the graph is complete); returns how many.
 * The checker's state is unchanged. */
int tsel_mask_compute(tsel_mask *m, tsel_prefix *p, uint8_t *allowed);

#endif
