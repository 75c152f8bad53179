/* parser.c: kernel text -> kernel (docs/kernel-text.md has the grammar).
 *
 * Two passes: a lexer turns the text into tokens, marking the first token
 * of every non-blank line with its indentation (2 spaces per level; a tab
 * in the indentation is an error), and a recursive-descent parser builds
 * the kernel directly, resolving names and checking dtypes as it goes.
 * Every error is "<file>:line:col: expected X, found Y"-style and unwinds
 * through one longjmp back to ir_parse, which frees the partial kernel.
 *
 * Names are unique within a kernel (the IR refers to them by name), so each
 * namespace (variables, buffers, blocks) is one hash table; scoping is a
 * visibility flag set while the defining loop or block is open. A block's
 * allocated buffers are visible in its whole header and body, so they are
 * parsed ahead, when the block opens. Recursion and tree depth are capped
 * so that no input can overflow the stack, and every loop consumes input,
 * so no input can hang the parser. A buffer, and the parameters together,
 * take at most WL_MAX_BYTES, the limit of workload specs (computed without
 * overflow), so every shape's element count fits in an int64.
 *
 * Does not verify what the IR verifier checks (bindings over loop variables
 * only, stores only to written buffers, region bounds): it parses what is
 * written, so that printing it shows the user what they wrote.
 */
#include "dragon/ir.h"
#include "dragon/wl.h" /* WL_MAX_BYTES: the one size limit, specs' and kernel text's */

#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 256 /* expression tree depth, nesting of statements */

/* ---- tokens -------------------------------------------------------------- */

typedef enum { T_EOF, T_NL, T_IDENT, T_INT, T_FLOAT, T_STR, T_PUNCT } tkind;

typedef struct {
  tkind k;
  const char *s; /* the text in the source */
  int len;
  int line, col;
  bool bol;      /* first token of its line */
  int indent;    /* bol: leading spaces */
  int next_line; /* bol: index of the next bol token at indent <= this one */
  int numlen;    /* T_INT, T_FLOAT: length without the dtype suffix */
  int sfx;       /* T_INT, T_FLOAT: dtype of the suffix, -1 if none */
  const char *str; /* T_STR: decoded */
} tok;

/* A name defined once in the kernel: variable, buffer or block. */
typedef struct {
  const char *name;
  int kind;
  void *ptr;
  int line, col;
  bool visible;
} entry;

enum { NS_VAR, NS_BUF, NS_BLOCK };

typedef struct {
  const char *file;
  dg_status *st;
  jmp_buf jb;
  dg_arena *tmp; /* tokens, tables, temporary lists */
  dg_func *f;
  tok *toks;
  int ntoks, cap;
  int pos;
  entry **tab; /* open addressing over (kind, name) */
  int tab_cap, tab_n;
  entry **scope; /* visible entries, innermost last */
  int nscope, scope_cap;
  int rdepth; /* parser recursion */
  int sdepth; /* statement nesting */
} parser;

/* An expression with its tree depth. */
typedef struct {
  dg_expr *e;
  int depth;
} pexpr;

/* ---- errors -------------------------------------------------------------- */

static void fail_at(parser *p, int line, int col, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 4, 5)));
static void fail_at(parser *p, int line, int col, const char *fmt, ...) {
  char msg[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  dg_fail(p->st, DG_ERR_PARSE, "%s:%d:%d: %s", p->file, line, col, msg);
  longjmp(p->jb, 1);
}

#define FAIL(p, t, ...) fail_at((p), (t)->line, (t)->col, __VA_ARGS__)

/* "','", "'foo'", "end of line": what the user wrote, for messages. */
static const char *describe(const tok *t, char *buf, size_t n) {
  switch (t->k) {
    case T_EOF: return "end of input";
    case T_NL: return "end of line";
    case T_STR: return "a string";
    default:
      if (t->len > 40) snprintf(buf, n, "'%.40s...'", t->s);
      else snprintf(buf, n, "'%.*s'", t->len, t->s);
      return buf;
  }
}

/* ---- lexer --------------------------------------------------------------- */

static bool is_alpha(char c) { return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
static bool is_digit(char c) { return c >= '0' && c <= '9'; }

static tok *push_tok(parser *p, tkind k, const char *s, int len, int line, int col) {
  if (p->ntoks == p->cap) {
    int cap = p->cap ? 2 * p->cap : 256;
    tok *t = DG_ANEWN(p->tmp, tok, cap);
    if (p->ntoks) memcpy(t, p->toks, sizeof(tok) * (size_t)p->ntoks);
    p->toks = t;
    p->cap = cap;
  }
  tok *t = &p->toks[p->ntoks++];
  memset(t, 0, sizeof *t);
  t->k = k;
  t->s = s;
  t->len = len;
  t->line = line;
  t->col = col;
  t->sfx = -1;
  return t;
}

static int hexval(char c) {
  if (is_digit(c)) return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* Lexes a string literal starting at s (the opening quote). */
static const char *lex_string(parser *p, const char *s, int line, int col) {
  dg_str b;
  dg_str_init(&b);
  const char *q = s + 1;
  for (;;) {
    char c = *q;
    if (c == 0 || c == '\n') {
      dg_str_free(&b);
      fail_at(p, line, col, "unterminated string (a string ends on its line)");
    }
    if (c == '"') break;
    if (c == '\\') {
      char e = q[1];
      int h1, h2;
      if (e == '"' || e == '\\') dg_str_putc(&b, e);
      else if (e == 'n') dg_str_putc(&b, '\n');
      else if (e == 't') dg_str_putc(&b, '\t');
      else if (e == 'x' && (h1 = hexval(q[2])) >= 0 && (h2 = hexval(q[3])) >= 0 && (h1 | h2)) {
        dg_str_putc(&b, (char)(h1 * 16 + h2));
        q += 2;
      } else {
        dg_str_free(&b);
        fail_at(p, line, col + (int)(q - s), "unknown escape in string (use \\\" \\\\ \\n \\t or \\xHH)");
      }
      q += 2;
      continue;
    }
    dg_str_putc(&b, c);
    q++;
  }
  tok *t = push_tok(p, T_STR, s, (int)(q + 1 - s), line, col);
  t->str = dg_arena_strndup(p->tmp, b.s, b.len);
  dg_str_free(&b);
  return q + 1;
}

/* Lexes a number: digits, an optional fraction and exponent, an optional
 * dtype suffix (5i64, 1.5f16). */
static const char *lex_number(parser *p, const char *s, int line, int col) {
  const char *q = s;
  bool is_float = false;
  while (is_digit(*q)) q++;
  if (*q == '.') {
    is_float = true;
    q++;
    while (is_digit(*q)) q++;
  }
  if ((*q == 'e' || *q == 'E') &&
      (is_digit(q[1]) || ((q[1] == '+' || q[1] == '-') && is_digit(q[2])))) {
    is_float = true;
    q += 2;
    while (is_digit(*q)) q++;
  }
  int numlen = (int)(q - s);
  int sfx = -1;
  if (is_alpha(*q) || is_digit(*q)) {
    const char *e = q;
    while (is_alpha(*e) || is_digit(*e)) e++;
    dg_dtype t;
    if (!dg_dtype_from_name(q, (size_t)(e - q), &t) || t == DG_BOOL)
      fail_at(p, line, col + numlen, "unknown literal suffix '%.*s' (expected i8, i32, i64, f16, f32 or f64)",
              (int)(e - q) > 20 ? 20 : (int)(e - q), q);
    if (is_float && !dg_dtype_is_float(t))
      fail_at(p, line, col, "a float literal cannot have the integer suffix '%s'", dg_dtype_name(t));
    if (!is_float && dg_dtype_is_float(t))
      fail_at(p, line, col, "a float literal needs a '.' or an exponent: write %.*s.0%s", numlen, s,
              dg_dtype_name(t));
    sfx = (int)t;
    q = e;
  }
  tok *t = push_tok(p, is_float ? T_FLOAT : T_INT, s, (int)(q - s), line, col);
  t->numlen = numlen;
  t->sfx = sfx;
  return q;
}

static const char *const puncts[] = {"//", "==", "!=", "<=", ">=", "&&", "||", "(", ")", "[", "]",
                                     "{", "}", ",", ":", "=", ".", "+", "-", "*", "/", "%",
                                     "<", ">", "!"};

static void lex(parser *p, const char *text) {
  const char *s = text;
  int line = 1;
  while (*s) {
    const char *ls = s;
    int ind = 0;
    while (*s == ' ') s++, ind++;
    const char *q = s;
    while (*q == ' ' || *q == '\t' || *q == '\r') q++;
    if (*q == 0 || *q == '\n' || *q == '#') { /* blank or comment-only line */
      while (*q && *q != '\n') q++;
      s = *q ? q + 1 : q;
      line++;
      continue;
    }
    if (*s == '\t') fail_at(p, line, (int)(s - ls) + 1, "tab in indentation (indent with 2 spaces per level)");
    if (ind % 2) fail_at(p, line, 1, "indentation of %d spaces is not a multiple of 2", ind);
    int first = p->ntoks;
    while (*s && *s != '\n') {
      char c = *s;
      int col = (int)(s - ls) + 1;
      if (c == ' ' || c == '\t' || c == '\r') {
        s++;
      } else if (c == '#') {
        while (*s && *s != '\n') s++;
      } else if (is_alpha(c)) {
        const char *e = s;
        while (is_alpha(*e) || is_digit(*e)) e++;
        push_tok(p, T_IDENT, s, (int)(e - s), line, col);
        s = e;
      } else if (is_digit(c)) {
        s = lex_number(p, s, line, col);
      } else if (c == '"') {
        s = lex_string(p, s, line, col);
      } else {
        size_t i;
        for (i = 0; i < DG_ARRAY_LEN(puncts); i++)
          if (strncmp(s, puncts[i], strlen(puncts[i])) == 0) break;
        if (i == DG_ARRAY_LEN(puncts)) {
          unsigned char u = (unsigned char)c;
          if (u > 0x20 && u < 0x7f) fail_at(p, line, col, "unexpected character '%c'", c);
          fail_at(p, line, col, "unexpected byte 0x%02x", u);
        }
        int n = (int)strlen(puncts[i]);
        push_tok(p, T_PUNCT, s, n, line, col);
        s += n;
      }
    }
    p->toks[first].bol = true;
    p->toks[first].indent = ind;
    push_tok(p, T_NL, s, 0, line, (int)(s - ls) + 1);
    if (*s) s++;
    line++;
  }
  /* the end of input sits after the last character */
  int col = 1;
  for (const char *q = s; q > text && q[-1] != '\n'; q--) col++;
  if (s > text && s[-1] == '\n') line--, col = 1;
  if (line < 1) line = 1;
  tok *e = push_tok(p, T_EOF, s, 0, s > text && s[-1] == '\n' ? line + 1 : line, col);
  e->bol = true;
  e->indent = -1;
  /* link each line to its next sibling-or-shallower line */
  int *stack = DG_ANEWN(p->tmp, int, p->ntoks);
  int n = 0;
  for (int i = 0; i < p->ntoks; i++) {
    if (!p->toks[i].bol) continue;
    while (n && p->toks[stack[n - 1]].indent >= p->toks[i].indent) p->toks[stack[--n]].next_line = i;
    stack[n++] = i;
  }
}

/* ---- token helpers ------------------------------------------------------- */

static tok *peek(parser *p) { return &p->toks[p->pos]; }
static tok *peek2(parser *p) { return &p->toks[p->pos + 1 < p->ntoks ? p->pos + 1 : p->pos]; }
static tok *next(parser *p) {
  tok *t = &p->toks[p->pos];
  if (t->k != T_EOF) p->pos++;
  return t;
}

static bool is_p(const tok *t, const char *s) {
  return t->k == T_PUNCT && t->len == (int)strlen(s) && memcmp(t->s, s, (size_t)t->len) == 0;
}
static bool is_kw(const tok *t, const char *s) {
  return t->k == T_IDENT && t->len == (int)strlen(s) && memcmp(t->s, s, (size_t)t->len) == 0;
}
static bool accept(parser *p, const char *s) {
  if (!is_p(peek(p), s)) return false;
  next(p);
  return true;
}

static tok *expect(parser *p, const char *s, const char *where) {
  tok *t = peek(p);
  if (!is_p(t, s)) {
    char b[64];
    FAIL(p, t, "expected '%s' %s, found %s", s, where, describe(t, b, sizeof b));
  }
  return next(p);
}

static tok *expect_ident(parser *p, const char *what) {
  tok *t = peek(p);
  if (t->k != T_IDENT) {
    char b[64];
    FAIL(p, t, "expected %s, found %s", what, describe(t, b, sizeof b));
  }
  return next(p);
}

static void expect_kw(parser *p, const char *kw, const char *where) {
  tok *t = peek(p);
  if (!is_kw(t, kw)) {
    char b[64];
    FAIL(p, t, "expected '%s' %s, found %s", kw, where, describe(t, b, sizeof b));
  }
  next(p);
}

static void expect_eol(parser *p, const char *after) {
  tok *t = peek(p);
  if (t->k != T_NL) {
    char b[64];
    FAIL(p, t, "expected end of line after %s, found %s", after, describe(t, b, sizeof b));
  }
  next(p);
}

static char *tok_str(parser *p, const tok *t) { return dg_arena_strndup(p->tmp, t->s, (size_t)t->len); }

/* A dotted name: ident ('.' ident)*, e.g. threadIdx.x, shared.dyn. */
static char *dotted(parser *p, const char *what) {
  dg_str b;
  dg_str_init(&b);
  tok *t = peek(p);
  if (t->k != T_IDENT) {
    char d[64];
    dg_str_free(&b);
    FAIL(p, t, "expected %s, found %s", what, describe(t, d, sizeof d));
  }
  next(p);
  dg_str_putn(&b, t->s, (size_t)t->len);
  while (is_p(peek(p), ".") && peek2(p)->k == T_IDENT) {
    next(p);
    tok *u = next(p);
    dg_str_putc(&b, '.');
    dg_str_putn(&b, u->s, (size_t)u->len);
  }
  char *r = dg_arena_strndup(p->tmp, b.s, b.len);
  dg_str_free(&b);
  return r;
}

/* ---- names --------------------------------------------------------------- */

static uint64_t name_hash(int kind, const char *s, size_t n) {
  return dg_hash_bytes(s, n, 0x9e3779b97f4a7c15ull * (uint64_t)(kind + 1));
}

static entry **tab_slot(parser *p, int kind, const char *s, size_t n) {
  size_t mask = (size_t)p->tab_cap - 1;
  for (size_t i = name_hash(kind, s, n) & mask;; i = (i + 1) & mask) {
    entry *e = p->tab[i];
    if (!e || (e->kind == kind && strlen(e->name) == n && memcmp(e->name, s, n) == 0)) return &p->tab[i];
  }
}

static entry *lookup(parser *p, int kind, const tok *t) {
  if (!p->tab_cap) return NULL;
  return *tab_slot(p, kind, t->s, (size_t)t->len);
}

static const char *ns_name(int kind) {
  return kind == NS_VAR ? "variable" : kind == NS_BUF ? "buffer" : "block";
}

/* Defines a name (not yet visible); duplicates are an error. */
static entry *define(parser *p, int kind, const tok *t, void *ptr) {
  if (2 * (p->tab_n + 1) > p->tab_cap) {
    entry **old = p->tab;
    int old_cap = p->tab_cap;
    p->tab_cap = old_cap ? 2 * old_cap : 64;
    p->tab = DG_ANEWN(p->tmp, entry *, p->tab_cap);
    for (int i = 0; i < old_cap; i++)
      if (old[i]) *tab_slot(p, old[i]->kind, old[i]->name, strlen(old[i]->name)) = old[i];
  }
  entry **slot = tab_slot(p, kind, t->s, (size_t)t->len);
  if (*slot)
    FAIL(p, t, "duplicate %s name '%.*s' (first defined at %d:%d)", ns_name(kind), t->len, t->s,
         (*slot)->line, (*slot)->col);
  entry *e = DG_ANEW(p->tmp, entry);
  e->name = tok_str(p, t);
  e->kind = kind;
  e->ptr = ptr;
  e->line = t->line;
  e->col = t->col;
  *slot = e;
  p->tab_n++;
  return e;
}

static void show(parser *p, entry *e) {
  if (p->nscope == p->scope_cap) {
    int cap = p->scope_cap ? 2 * p->scope_cap : 64;
    entry **s = DG_ANEWN(p->tmp, entry *, cap);
    if (p->nscope) memcpy(s, p->scope, sizeof(entry *) * (size_t)p->nscope);
    p->scope = s;
    p->scope_cap = cap;
  }
  e->visible = true;
  p->scope[p->nscope++] = e;
}

static void hide_to(parser *p, int mark) {
  while (p->nscope > mark) p->scope[--p->nscope]->visible = false;
}

static bool is_reserved(const tok *t) {
  static const char *const words[] = {"true", "false", "inf", "nan", "inff16", "inff32",
                                      "inff64", "nanf16", "nanf32", "nanf64"};
  for (size_t i = 0; i < DG_ARRAY_LEN(words); i++)
    if (is_kw(t, words[i])) return true;
  return false;
}

static dg_var *define_var(parser *p, const tok *t, entry **out) {
  if (is_reserved(t)) FAIL(p, t, "'%.*s' is a literal and cannot name a variable", t->len, t->s);
  dg_var *v = ir_var_new(p->f, tok_str(p, t), DG_I32);
  *out = define(p, NS_VAR, t, v);
  return v;
}

static dg_buffer *find_buffer(parser *p, const tok *t) {
  entry *e = lookup(p, NS_BUF, t);
  if (!e) FAIL(p, t, "unknown buffer '%.*s'", t->len, t->s);
  if (!e->visible)
    FAIL(p, t, "buffer '%.*s' (allocated at %d:%d) is not visible here", t->len, t->s, e->line, e->col);
  return e->ptr;
}

/* A growing pointer list in the scratch arena. */
typedef struct {
  void **v;
  int n, cap;
} plist;

static void plist_push(parser *p, plist *l, void *x) {
  if (l->n == l->cap) {
    int cap = l->cap ? 2 * l->cap : 8;
    void **v = DG_ANEWN(p->tmp, void *, cap);
    if (l->n) memcpy(v, l->v, sizeof(void *) * (size_t)l->n);
    l->v = v;
    l->cap = cap;
  }
  l->v[l->n++] = x;
}

/* ---- numbers ------------------------------------------------------------- */

/* The magnitude of an integer token; up to 2^63 (the magnitude of INT64_MIN). */
static uint64_t int_magnitude(parser *p, const tok *t) {
  uint64_t v = 0;
  for (int i = 0; i < t->numlen; i++) {
    uint64_t d = (uint64_t)(t->s[i] - '0');
    if (v > (UINT64_C(1) << 63) / 10 || v * 10 + d > (UINT64_C(1) << 63))
      FAIL(p, t, "integer literal '%.*s' is too large", t->numlen > 40 ? 40 : t->numlen, t->s);
    v = v * 10 + d;
  }
  return v;
}

static int64_t signed_value(parser *p, const tok *t, bool neg, int64_t lo, int64_t hi, const char *what) {
  uint64_t m = int_magnitude(p, t);
  int64_t v;
  if (m == (UINT64_C(1) << 63)) {
    if (!neg) FAIL(p, t, "integer literal '%.*s' is too large", t->numlen, t->s);
    v = INT64_MIN;
  } else {
    v = neg ? -(int64_t)m : (int64_t)m;
  }
  if (v < lo || v > hi)
    FAIL(p, t, "%s%.*s is out of range for %s", neg ? "-" : "", t->numlen, t->s, what);
  return v;
}

/* A plain integer (no suffix) with an optional minus sign. */
static int64_t plain_int(parser *p, const char *what, int64_t lo, int64_t hi) {
  tok *start = peek(p);
  bool neg = accept(p, "-");
  tok *t = peek(p);
  if (t->k != T_INT || t->sfx >= 0) {
    char b[64];
    FAIL(p, t, "expected %s, found %s", what, describe(t, b, sizeof b));
  }
  next(p);
  int64_t v = signed_value(p, t, neg, INT64_MIN, INT64_MAX, "i64");
  if (v < lo || v > hi) {
    if (hi == INT64_MAX) FAIL(p, start, "%s must be at least %lld, found %lld", what, (long long)lo, (long long)v);
    FAIL(p, start, "%s must be in [%lld, %lld], found %lld", what, (long long)lo, (long long)hi, (long long)v);
  }
  return v;
}

static double float_value(parser *p, const tok *t, dg_dtype dt) {
  char buf[128];
  if (t->numlen >= (int)sizeof buf) FAIL(p, t, "float literal is too long");
  memcpy(buf, t->s, (size_t)t->numlen);
  buf[t->numlen] = 0;
  double v;
  if (dt == DG_F32) v = (double)strtof(buf, NULL);
  else v = strtod(buf, NULL);
  if (dt == DG_F16 && fabs(v) >= 65520.0) v = INFINITY; /* rounds to inf in f16 */
  if (isinf(v)) FAIL(p, t, "float literal %s is out of range for %s", buf, dg_dtype_name(dt));
  return v;
}

/* inf, nan and their suffixed forms; false if t is none of them. */
static bool special_float(const tok *t, dg_dtype *dt, double *v) {
  const char *s = t->s;
  if (t->k != T_IDENT || t->len < 3 || (memcmp(s, "inf", 3) != 0 && memcmp(s, "nan", 3) != 0)) return false;
  if (t->len == 3) *dt = DG_F32;
  else if (!(t->len == 6 && s[3] == 'f' && dg_dtype_from_name(s + 3, 3, dt) && dg_dtype_is_float(*dt)))
    return false;
  *v = s[0] == 'i' ? INFINITY : NAN;
  return true;
}

/* ---- expressions --------------------------------------------------------- */

static pexpr parse_expr(parser *p);

static pexpr mk(parser *p, const tok *at, dg_expr *e, int depth) {
  if (depth > MAX_DEPTH) FAIL(p, at, "expression nested too deeply (more than %d levels)", MAX_DEPTH);
  return (pexpr){e, depth};
}

static int max2(int a, int b) { return a > b ? a : b; }

static const char *dt(dg_dtype t) { return dg_dtype_name(t); }

static pexpr binary(parser *p, const tok *op, dg_expr_kind k, pexpr a, pexpr b) {
  const char *o = dg_expr_kind_name(k);
  dg_dtype ta = a.e->dtype, tb = b.e->dtype;
  bool logic = k == DG_EXPR_AND || k == DG_EXPR_OR;
  if (logic) {
    if (ta != DG_BOOL || tb != DG_BOOL)
      FAIL(p, op, "operands of '%s' must be bool, found %s and %s", o, dt(ta), dt(tb));
  } else if (ta != tb) {
    FAIL(p, op, "operands of '%s' have different dtypes (%s and %s)", o, dt(ta), dt(tb));
  } else if (k == DG_EXPR_DIV && !dg_dtype_is_float(ta)) {
    FAIL(p, op, "'/' is division of floats; use '//' to divide %s values", dt(ta));
  } else if ((k == DG_EXPR_FLOORDIV || k == DG_EXPR_FLOORMOD) && !dg_dtype_is_int(ta)) {
    FAIL(p, op, "'%s' needs integer operands, found %s", o, dt(ta));
  } else if ((k == DG_EXPR_FLOORDIV || k == DG_EXPR_FLOORMOD) && b.e->kind == DG_EXPR_INT &&
             b.e->ival == 0) {
    FAIL(p, op, "'%s' by the constant 0 (division by zero)", o);
  } else if (k != DG_EXPR_EQ && k != DG_EXPR_NE && ta == DG_BOOL) {
    FAIL(p, op, "'%s' does not apply to bool operands", o);
  }
  return mk(p, op, ir_bin(p->f, k, a.e, b.e), max2(a.depth, b.depth) + 1);
}

static pexpr literal(parser *p, bool neg) {
  tok *t = next(p);
  dg_expr *e;
  if (t->k == T_INT) {
    dg_dtype ty = t->sfx >= 0 ? (dg_dtype)t->sfx : DG_I32;
    int64_t lo = ty == DG_I8 ? INT8_MIN : ty == DG_I32 ? INT32_MIN : INT64_MIN;
    int64_t hi = ty == DG_I8 ? INT8_MAX : ty == DG_I32 ? INT32_MAX : INT64_MAX;
    e = ir_int_t(p->f, signed_value(p, t, neg, lo, hi, dt(ty)), ty);
  } else if (t->k == T_FLOAT) {
    dg_dtype ty = t->sfx >= 0 ? (dg_dtype)t->sfx : DG_F32;
    double v = float_value(p, t, ty);
    e = ir_float(p->f, neg ? -v : v, ty);
  } else {
    dg_dtype ty;
    double v;
    DG_ASSERT(special_float(t, &ty, &v));
    e = ir_float(p->f, neg ? -v : v, ty);
  }
  return (pexpr){e, 1};
}

static bool starts_literal(const tok *t) {
  dg_dtype ty;
  double v;
  return t->k == T_INT || t->k == T_FLOAT || special_float(t, &ty, &v);
}

/* Arguments of a call: '(' expr (',' expr)* ')', at most max of them. */
static int call_args(parser *p, const tok *fn, pexpr *args, int max) {
  int n = 0;
  expect(p, "(", "after the function name");
  if (!is_p(peek(p), ")")) {
    for (;;) {
      if (n == max)
        FAIL(p, peek(p), "too many arguments to '%.*s' (it takes %d)", fn->len, fn->s, max);
      args[n++] = parse_expr(p);
      if (!accept(p, ",")) break;
    }
  }
  expect(p, ")", "after the arguments");
  if (n != max) FAIL(p, fn, "'%.*s' takes %d argument%s, found %d", fn->len, fn->s, max, max == 1 ? "" : "s", n);
  return n;
}

static pexpr call(parser *p, tok *fn) {
  pexpr a[3];
  dg_dtype ty;
  dg_math m;
  if (is_kw(fn, "min") || is_kw(fn, "max")) {
    call_args(p, fn, a, 2);
    if (a[0].e->dtype != a[1].e->dtype)
      FAIL(p, fn, "arguments of '%.*s' have different dtypes (%s and %s)", fn->len, fn->s,
           dt(a[0].e->dtype), dt(a[1].e->dtype));
    if (a[0].e->dtype == DG_BOOL) FAIL(p, fn, "'%.*s' does not apply to bool", fn->len, fn->s);
    dg_expr_kind k = is_kw(fn, "min") ? DG_EXPR_MIN : DG_EXPR_MAX;
    return mk(p, fn, ir_bin(p->f, k, a[0].e, a[1].e), max2(a[0].depth, a[1].depth) + 1);
  }
  if (is_kw(fn, "select")) {
    call_args(p, fn, a, 3);
    if (a[0].e->dtype != DG_BOOL)
      FAIL(p, fn, "the condition of 'select' must be bool, found %s", dt(a[0].e->dtype));
    if (a[1].e->dtype != a[2].e->dtype)
      FAIL(p, fn, "the arms of 'select' have different dtypes (%s and %s)", dt(a[1].e->dtype),
           dt(a[2].e->dtype));
    return mk(p, fn, ir_select(p->f, a[0].e, a[1].e, a[2].e),
              max2(a[0].depth, max2(a[1].depth, a[2].depth)) + 1);
  }
  if (dg_dtype_from_name(fn->s, (size_t)fn->len, &ty)) {
    call_args(p, fn, a, 1);
    return mk(p, fn, ir_cast(p->f, ty, a[0].e), a[0].depth + 1);
  }
  if (dg_math_from_name(fn->s, (size_t)fn->len, &m)) {
    int n = dg_math_arity(m);
    DG_ASSERT(n >= 1 && n <= 3);
    call_args(p, fn, a, n);
    dg_expr *args[3];
    int depth = 0;
    for (int i = 0; i < n; i++) {
      if (!dg_dtype_is_float(a[i].e->dtype))
        FAIL(p, fn, "'%s' needs float arguments, found %s (cast with f32(...))", dg_math_name(m),
             dt(a[i].e->dtype));
      if (a[i].e->dtype != a[0].e->dtype)
        FAIL(p, fn, "arguments of '%s' have different dtypes (%s and %s)", dg_math_name(m),
             dt(a[0].e->dtype), dt(a[i].e->dtype));
      args[i] = a[i].e;
      depth = max2(depth, a[i].depth);
    }
    return mk(p, fn, ir_call(p->f, m, args, n), depth + 1);
  }
  FAIL(p, fn, "unknown function '%.*s'", fn->len, fn->s);
}

/* Index list of a load or store: '[' expr, ... ']' with exactly ndim
 * integer indices. Returns the deepest index's depth. */
static int indices(parser *p, dg_buffer *b, dg_expr **idx) {
  tok *open = expect(p, "[", "after the buffer name");
  int n = 0, depth = 0;
  if (!is_p(peek(p), "]")) {
    for (;;) {
      tok *at = peek(p);
      if (n == b->ndim)
        FAIL(p, at, "'%s' has %d dimension%s, found more indices", b->name, b->ndim, b->ndim == 1 ? "" : "s");
      pexpr x = parse_expr(p);
      if (!dg_dtype_is_int(x.e->dtype))
        FAIL(p, at, "an index must be an integer, found %s", dt(x.e->dtype));
      idx[n++] = x.e;
      depth = max2(depth, x.depth);
      if (n == b->ndim && is_p(peek(p), ","))
        FAIL(p, peek(p), "expected ']' after index list, found ',' ('%s' has %d dimension%s)", b->name, b->ndim,
             b->ndim == 1 ? "" : "s");
      if (!accept(p, ",")) break;
    }
  }
  tok *close = peek(p);
  if (!is_p(close, "]")) {
    char d[64];
    FAIL(p, close, "expected ']' after index list, found %s", describe(close, d, sizeof d));
  }
  if (n != b->ndim)
    FAIL(p, open, "'%s' has %d dimension%s, found %d ind%s", b->name, b->ndim, b->ndim == 1 ? "" : "s",
         n, n == 1 ? "ex" : "ices");
  next(p);
  return depth;
}

static pexpr atom(parser *p) {
  tok *t = peek(p);
  char d[64];
  if (starts_literal(t)) return literal(p, false);
  if (is_p(t, "(")) {
    next(p);
    pexpr x = parse_expr(p);
    expect(p, ")", "to close '('");
    return x;
  }
  if (t->k != T_IDENT) FAIL(p, t, "expected an expression, found %s", describe(t, d, sizeof d));
  next(p);
  tok *u = peek(p);
  if (is_p(u, "(")) return call(p, t);
  if (is_p(u, "[")) {
    dg_buffer *b = find_buffer(p, t);
    dg_expr *idx[DG_MAX_DIMS];
    int depth = indices(p, b, idx);
    return mk(p, t, ir_load(p->f, b, idx, b->ndim), depth + 1);
  }
  if (is_kw(t, "true") || is_kw(t, "false")) return (pexpr){ir_bool(p->f, is_kw(t, "true")), 1};
  entry *e = lookup(p, NS_VAR, t);
  if (!e) {
    if (lookup(p, NS_BUF, t)) FAIL(p, t, "'%.*s' is a buffer: load from it with %.*s[...]", t->len, t->s, t->len, t->s);
    FAIL(p, t, "unknown variable '%.*s'", t->len, t->s);
  }
  if (!e->visible)
    FAIL(p, t, "variable '%.*s' (defined at %d:%d) is not in scope here", t->len, t->s, e->line, e->col);
  return (pexpr){ir_var(p->f, e->ptr), 1};
}

static void enter(parser *p, const tok *at) {
  if (++p->rdepth > MAX_DEPTH) FAIL(p, at, "expression nested too deeply (more than %d levels)", MAX_DEPTH);
}

static pexpr unary(parser *p) {
  tok *t = peek(p);
  if (!is_p(t, "-")) return atom(p);
  next(p);
  if (starts_literal(peek(p))) return literal(p, true);
  enter(p, t);
  pexpr x = unary(p);
  p->rdepth--;
  dg_dtype ty = x.e->dtype;
  if (ty == DG_BOOL) FAIL(p, t, "cannot negate a bool");
  pexpr zero = {dg_dtype_is_float(ty) ? ir_float(p->f, 0.0, ty) : ir_int_t(p->f, 0, ty), 1};
  return binary(p, t, DG_EXPR_SUB, zero, x);
}

static pexpr mul_expr(parser *p) {
  pexpr a = unary(p);
  for (;;) {
    tok *t = peek(p);
    dg_expr_kind k;
    if (is_p(t, "*")) k = DG_EXPR_MUL;
    else if (is_p(t, "/")) k = DG_EXPR_DIV;
    else if (is_p(t, "//")) k = DG_EXPR_FLOORDIV;
    else if (is_p(t, "%")) k = DG_EXPR_FLOORMOD;
    else return a;
    next(p);
    a = binary(p, t, k, a, unary(p));
  }
}

static pexpr add_expr(parser *p) {
  pexpr a = mul_expr(p);
  for (;;) {
    tok *t = peek(p);
    dg_expr_kind k;
    if (is_p(t, "+")) k = DG_EXPR_ADD;
    else if (is_p(t, "-")) k = DG_EXPR_SUB;
    else return a;
    next(p);
    a = binary(p, t, k, a, mul_expr(p));
  }
}

static bool cmp_kind(const tok *t, dg_expr_kind *k) {
  static const struct {
    const char *s;
    dg_expr_kind k;
  } ops[] = {{"==", DG_EXPR_EQ}, {"!=", DG_EXPR_NE}, {"<", DG_EXPR_LT},
             {"<=", DG_EXPR_LE}, {">", DG_EXPR_GT},  {">=", DG_EXPR_GE}};
  for (size_t i = 0; i < DG_ARRAY_LEN(ops); i++)
    if (is_p(t, ops[i].s)) {
      *k = ops[i].k;
      return true;
    }
  return false;
}

static pexpr cmp_expr(parser *p) {
  pexpr a = add_expr(p);
  dg_expr_kind k;
  tok *t = peek(p);
  if (!cmp_kind(t, &k)) return a;
  next(p);
  pexpr r = binary(p, t, k, a, add_expr(p));
  if (cmp_kind(peek(p), &k))
    FAIL(p, peek(p), "comparisons do not chain: use parentheses or '&&'");
  return r;
}

static pexpr not_expr(parser *p) {
  tok *t = peek(p);
  if (!is_p(t, "!")) return cmp_expr(p);
  next(p);
  enter(p, t);
  pexpr x = not_expr(p);
  p->rdepth--;
  if (x.e->dtype != DG_BOOL) FAIL(p, t, "operand of '!' must be bool, found %s", dt(x.e->dtype));
  return mk(p, t, ir_not(p->f, x.e), x.depth + 1);
}

static pexpr and_expr(parser *p) {
  pexpr a = not_expr(p);
  while (is_p(peek(p), "&&")) {
    tok *t = next(p);
    a = binary(p, t, DG_EXPR_AND, a, not_expr(p));
  }
  return a;
}

static pexpr parse_expr(parser *p) {
  tok *t = peek(p);
  enter(p, t);
  pexpr a = and_expr(p);
  while (is_p(peek(p), "||")) {
    tok *o = next(p);
    a = binary(p, o, DG_EXPR_OR, a, and_expr(p));
  }
  p->rdepth--;
  return a;
}

static dg_expr *typed_expr(parser *p, dg_dtype want, const char *what) {
  tok *t = peek(p);
  pexpr x = parse_expr(p);
  if (x.e->dtype != want)
    FAIL(p, t, "%s must be %s, found %s", what, dt(want), dt(x.e->dtype));
  return x.e;
}

/* ---- declarations and annotations ---------------------------------------- */

/* ": dtype[shape] scope?" after a buffer's name. */
static dg_buffer *buffer_decl(parser *p, const tok *name) {
  char d[64];
  expect(p, ":", "after the buffer name");
  tok *tt = expect_ident(p, "a dtype");
  dg_dtype ty;
  if (!dg_dtype_from_name(tt->s, (size_t)tt->len, &ty))
    FAIL(p, tt, "unknown dtype '%.*s' (expected bool, i8, i32, i64, f16, f32 or f64)",
         tt->len > 40 ? 40 : tt->len, tt->s);
  expect(p, "[", "before the shape");
  int64_t shape[DG_MAX_DIMS];
  int n = 0;
  if (!is_p(peek(p), "]")) {
    for (;;) {
      if (n == DG_MAX_DIMS) FAIL(p, peek(p), "a buffer has at most %d dimensions", DG_MAX_DIMS);
      shape[n++] = plain_int(p, "a dimension", 1, INT64_MAX);
      if (!accept(p, ",")) break;
    }
  }
  expect(p, "]", "after the shape");
  dg_scope scope = DG_SCOPE_GLOBAL;
  tok *st = peek(p);
  if (st->k == T_IDENT) {
    char *s = dotted(p, "a storage scope");
    if (!dg_scope_from_name(s, strlen(s), &scope))
      FAIL(p, st, "unknown storage scope '%.40s' (expected global, shared, shared.dyn, local, "
                  "wmma.matrix_a, wmma.matrix_b or wmma.accumulator)", s);
  } else if (st->k != T_NL && !is_p(st, ",") && !is_p(st, ")")) {
    FAIL(p, st, "expected a storage scope or the end of the declaration, found %s", describe(st, d, sizeof d));
  }
  /* The size limit of workload specs, here too: a shape whose product
   * overflows, or a buffer too large to allocate, is refused at its name
   * (so nothing downstream computes a wrapped element count). */
  int64_t bytes = dg_dtype_bytes(ty);
  bool over = false;
  for (int i = 0; i < n && !over; i++) over = __builtin_mul_overflow(bytes, shape[i], &bytes);
  if (over || bytes > WL_MAX_BYTES) {
    char size[48];
    if (over) snprintf(size, sizeof size, "more than 2^63 bytes");
    else snprintf(size, sizeof size, "%.1f MiB", (double)bytes / (1 << 20));
    FAIL(p, name, "buffer '%.*s' takes %s, more than the limit of %lld MiB (WL_MAX_BYTES)",
         name->len > 40 ? 40 : name->len, name->s, size, (long long)(WL_MAX_BYTES >> 20));
  }
  dg_buffer *b = ir_buffer_new(p->f, tok_str(p, name), ty, n, shape, scope);
  return b;
}

static void ann(parser *p, dg_anns *anns) {
  char d[64];
  tok *kt = peek(p);
  const char *key;
  if (kt->k == T_STR) {
    next(p);
    key = kt->str;
  } else {
    key = dotted(p, "an annotation key");
  }
  if (ir_anns_get(anns, key)) FAIL(p, kt, "duplicate annotation key '%.60s'", key);
  expect(p, "=", "after the annotation key");
  tok *t = peek(p);
  if (t->k == T_STR) {
    next(p);
    ir_anns_set_str(p->f, anns, key, t->str);
    return;
  }
  if (is_p(t, "[")) {
    next(p);
    int64_t *v = NULL;
    int n = 0, cap = 0;
    if (!is_p(peek(p), "]")) {
      for (;;) {
        if (n == cap) {
          cap = cap ? 2 * cap : 8;
          int64_t *w = DG_ANEWN(p->tmp, int64_t, cap);
          if (n) memcpy(w, v, sizeof(int64_t) * (size_t)n);
          v = w;
        }
        v[n++] = plain_int(p, "an integer in the list", INT64_MIN, INT64_MAX);
        if (!accept(p, ",")) break;
      }
    }
    expect(p, "]", "after the integer list");
    ir_anns_set_ints(p->f, anns, key, v, n);
    return;
  }
  bool neg = accept(p, "-");
  tok *v = peek(p);
  if (v->k == T_INT && v->sfx < 0) {
    next(p);
    ir_anns_set_int(p->f, anns, key, signed_value(p, v, neg, INT64_MIN, INT64_MAX, "i64"));
  } else if (v->k == T_FLOAT && v->sfx < 0) {
    next(p);
    double x = float_value(p, v, DG_F64);
    ir_anns_set_float(p->f, anns, key, neg ? -x : x);
  } else if (is_kw(v, "inf") || is_kw(v, "nan")) {
    next(p);
    double x = is_kw(v, "inf") ? INFINITY : NAN;
    ir_anns_set_float(p->f, anns, key, neg ? -x : x);
  } else {
    FAIL(p, v, "expected an annotation value (an integer, a float, a string or [integers]), found %s",
         describe(v, d, sizeof d));
  }
}

/* ---- statements ---------------------------------------------------------- */

#define MAX_NEST 64 /* loops, blocks and ifs nested in one another */

static dg_stmt *statement(parser *p, int indent);

static void nest(parser *p, const tok *at, int n) {
  p->sdepth += n;
  if (p->sdepth > MAX_NEST) FAIL(p, at, "statements nested too deeply (more than %d levels)", MAX_NEST);
}

static dg_stmt *as_stmt(parser *p, plist *l) {
  if (l->n == 0) return NULL;
  if (l->n == 1) return l->v[0];
  return ir_seq(p->f, (dg_stmt **)l->v, l->n);
}

static void check_no_deeper(parser *p, int indent) {
  tok *t = peek(p);
  if (t->k != T_EOF && t->indent > indent)
    FAIL(p, t, "unexpected indentation (expected %d spaces, found %d)", indent, t->indent);
}

/* Statements on consecutive lines at exactly `indent` spaces. */
static dg_stmt *suite(parser *p, int indent) {
  plist l = {0};
  while (peek(p)->k != T_EOF && peek(p)->indent == indent) plist_push(p, &l, statement(p, indent));
  check_no_deeper(p, indent);
  return as_stmt(p, &l);
}

/* The indented body after a header line at `indent`; NULL when empty. */
static int body_indent(parser *p, int indent) {
  tok *t = peek(p);
  if (t->k == T_EOF || t->indent <= indent) return -1;
  if (t->indent != indent + 2)
    FAIL(p, t, "expected the body indented by 2 more spaces (%d), found %d", indent + 2, t->indent);
  return indent + 2;
}

static dg_stmt *body(parser *p, int indent) {
  int bi = body_indent(p, indent);
  return bi < 0 ? NULL : suite(p, bi);
}

static dg_stmt *store(parser *p) {
  tok *name = next(p);
  dg_buffer *b = find_buffer(p, name);
  dg_expr *idx[DG_MAX_DIMS];
  indices(p, b, idx);
  expect(p, "=", "after the stored-to element");
  tok *vt = peek(p);
  pexpr v = parse_expr(p);
  if (v.e->dtype != b->dtype) {
    char hint[96] = "";
    if (v.e->kind == DG_EXPR_INT && dg_dtype_is_float(b->dtype))
      snprintf(hint, sizeof hint, " (a float literal has a '.': write %lld.0%s)", (long long)v.e->ival,
               b->dtype == DG_F32 ? "" : dg_dtype_name(b->dtype));
    FAIL(p, vt, "cannot store %s into %s buffer '%s'%s", dt(v.e->dtype), dt(b->dtype), b->name, hint);
  }
  expect_eol(p, "the store");
  return ir_store(p->f, b, idx, b->ndim, v.e);
}

static dg_loop_kind loop_kind_word(const tok *t, bool *ok) {
  static const struct {
    const char *s;
    dg_loop_kind k;
  } words[] = {{"serial", DG_LOOP_SERIAL},
               {"parallel", DG_LOOP_PARALLEL},
               {"vectorized", DG_LOOP_VECTORIZED},
               {"unrolled", DG_LOOP_UNROLLED}};
  for (size_t i = 0; i < DG_ARRAY_LEN(words); i++)
    if (is_kw(t, words[i].s)) {
      *ok = true;
      return words[i].k;
    }
  *ok = false;
  return DG_LOOP_SERIAL;
}

static dg_stmt *for_stmt(parser *p, int indent) {
  char d[64];
  tok *kw = next(p);
  plist vars = {0}, exts = {0};
  int mark = p->nscope;
  for (;;) {
    tok *n = expect_ident(p, "a loop variable name");
    entry *e;
    define_var(p, n, &e);
    plist_push(p, &vars, e);
    if (!accept(p, ",")) break;
  }
  expect_kw(p, "in", "after the loop variables");
  tok *et = peek(p);
  if (is_kw(et, "grid") && is_p(peek2(p), "(")) {
    next(p);
    next(p);
    for (;;) {
      int64_t *x = DG_ANEW(p->tmp, int64_t);
      *x = plain_int(p, "a loop extent", 1, INT64_MAX);
      plist_push(p, &exts, x);
      if (!accept(p, ",")) break;
    }
    expect(p, ")", "after the grid extents");
    if (exts.n != vars.n)
      FAIL(p, et, "grid has %d extent%s for %d loop variable%s", exts.n, exts.n == 1 ? "" : "s", vars.n,
           vars.n == 1 ? "" : "s");
  } else {
    int64_t *x = DG_ANEW(p->tmp, int64_t);
    *x = plain_int(p, "a loop extent (a positive integer or grid(...))", 1, INT64_MAX);
    plist_push(p, &exts, x);
    if (vars.n != 1) FAIL(p, et, "%d loop variables need grid(...) with %d extents", vars.n, vars.n);
  }
  dg_loop_kind kind = DG_LOOP_SERIAL;
  dg_thread_tag tag = DG_TAG_NONE;
  dg_anns anns = {0};
  tok *kt = peek(p);
  if (kt->k == T_IDENT) {
    bool ok;
    kind = loop_kind_word(kt, &ok);
    if (ok) {
      next(p);
    } else if (is_kw(kt, "bind")) {
      next(p);
      expect(p, "(", "after 'bind'");
      tok *tt = peek(p);
      char *s = dotted(p, "a thread tag");
      if (!dg_thread_tag_from_name(s, strlen(s), &tag))
        FAIL(p, tt, "unknown thread tag '%.40s' (expected blockIdx.x|y|z, threadIdx.x|y|z or vthread.x|y|z)", s);
      expect(p, ")", "after the thread tag");
      kind = DG_LOOP_THREAD;
    } else {
      FAIL(p, kt, "unknown loop kind %s (expected parallel, vectorized, unrolled or bind(tag))",
           describe(kt, d, sizeof d));
    }
  }
  tok *at = peek(p);
  if (accept(p, "{")) {
    if (!is_p(peek(p), "}")) {
      for (;;) {
        ann(p, &anns);
        if (!accept(p, ",")) break;
      }
    }
    expect(p, "}", "after the loop annotations");
  }
  if (vars.n > 1 && (kt->k == T_IDENT || anns.n))
    FAIL(p, kt->k == T_IDENT ? kt : at, "a loop kind or annotations need a single loop variable, not grid(...)");
  expect(p, ":", "at the end of the loop header");
  expect_eol(p, "the loop header");
  nest(p, kw, vars.n);
  for (int i = 0; i < vars.n; i++) show(p, vars.v[i]);
  dg_stmt *s = body(p, indent);
  hide_to(p, mark);
  p->sdepth -= vars.n;
  for (int i = vars.n; i-- > 0;) {
    entry *e = vars.v[i];
    s = ir_for(p->f, e->ptr, *(int64_t *)exts.v[i], i == 0 ? kind : DG_LOOP_SERIAL,
               i == 0 ? tag : DG_TAG_NONE, s);
  }
  s->anns = anns;
  return s;
}

static dg_stmt *if_stmt(parser *p, int indent) {
  tok *kw = next(p);
  nest(p, kw, 1);
  dg_expr *cond = typed_expr(p, DG_BOOL, "an if condition");
  expect(p, ":", "after the if condition");
  expect_eol(p, "the if header");
  dg_stmt *then_s = body(p, indent), *else_s = NULL;
  tok *t = peek(p);
  if (t->k != T_EOF && t->indent == indent) {
    if (is_kw(t, "else") && is_p(peek2(p), ":")) {
      next(p);
      next(p);
      expect_eol(p, "'else:'");
      else_s = body(p, indent);
    } else if (is_kw(t, "elif")) {
      else_s = if_stmt(p, indent);
    }
  }
  p->sdepth--;
  return ir_if(p->f, cond, then_s, else_s);
}

/* Buf[d, ...] where each d is an index or lo:hi. */
static dg_region region(parser *p) {
  tok *name = expect_ident(p, "a buffer name");
  dg_buffer *b = find_buffer(p, name);
  dg_region r = {b, DG_ANEWN(p->f->arena, dg_expr *, b->ndim ? b->ndim : 1),
                 DG_ANEWN(p->f->arena, dg_expr *, b->ndim ? b->ndim : 1)};
  tok *open = expect(p, "[", "after the buffer name");
  int n = 0;
  if (!is_p(peek(p), "]")) {
    for (;;) {
      tok *at = peek(p);
      if (n == b->ndim)
        FAIL(p, at, "'%s' has %d dimension%s, found more in the region", b->name, b->ndim, b->ndim == 1 ? "" : "s");
      pexpr lo = parse_expr(p);
      if (!dg_dtype_is_int(lo.e->dtype)) FAIL(p, at, "a region bound must be an integer, found %s", dt(lo.e->dtype));
      r.min[n] = lo.e;
      r.ext[n] = ir_int(p->f, 1);
      if (accept(p, ":")) {
        tok *ht = peek(p);
        pexpr hi = parse_expr(p);
        if (hi.e->dtype != lo.e->dtype)
          FAIL(p, ht, "the bounds of a range must have one integer dtype, found %s:%s", dt(lo.e->dtype),
               dt(hi.e->dtype));
        r.ext[n] = ir_text_range_extent(p->f, lo.e, hi.e);
      }
      n++;
      if (n == b->ndim && is_p(peek(p), ","))
        FAIL(p, peek(p), "expected ']' after region, found ',' ('%s' has %d dimension%s)", b->name, b->ndim,
             b->ndim == 1 ? "" : "s");
      if (!accept(p, ",")) break;
    }
  }
  if (!is_p(peek(p), "]")) {
    char d[64];
    FAIL(p, peek(p), "expected ']' after region, found %s", describe(peek(p), d, sizeof d));
  }
  if (n != b->ndim)
    FAIL(p, open, "'%s' has %d dimension%s, found %d in the region", b->name, b->ndim, b->ndim == 1 ? "" : "s", n);
  next(p);
  return r;
}

static void regions(parser *p, dg_region **arr, int *count) {
  next(p);
  plist l = {0};
  for (;;) {
    dg_region *r = DG_ANEW(p->tmp, dg_region);
    *r = region(p);
    plist_push(p, &l, r);
    if (!accept(p, ",")) break;
  }
  expect_eol(p, "the regions");
  dg_region *a = DG_ANEWN(p->f->arena, dg_region, *count + l.n);
  if (*count) memcpy(a, *arr, sizeof(dg_region) * (size_t)*count);
  for (int i = 0; i < l.n; i++) a[*count + i] = *(dg_region *)l.v[i];
  *arr = a;
  *count += l.n;
}

static bool is_header_word(const tok *t) {
  return is_kw(t, "reads") || is_kw(t, "writes") || is_kw(t, "where") || is_kw(t, "alloc") ||
         is_kw(t, "attr") || is_kw(t, "init");
}

static void skip_line(parser *p) {
  while (peek(p)->k != T_NL && peek(p)->k != T_EOF) next(p);
  next(p);
}

/* Parses the alloc lines of a block ahead of its header, so that its
 * buffers are visible in all of it. */
static void prescan_allocs(parser *p, dg_block *b, int bi) {
  int save = p->pos;
  plist l = {0};
  for (int i = p->pos; p->toks[i].k != T_EOF && p->toks[i].indent == bi; i = p->toks[i].next_line) {
    if (!is_kw(&p->toks[i], "alloc") || is_p(&p->toks[i + 1], "[")) continue;
    p->pos = i + 1;
    tok *n = expect_ident(p, "a buffer name after 'alloc'");
    dg_buffer *buf = buffer_decl(p, n);
    expect_eol(p, "the alloc line");
    show(p, define(p, NS_BUF, n, buf));
    plist_push(p, &l, buf);
  }
  p->pos = save;
  b->n_allocs = l.n;
  b->allocs = l.n ? dg_arena_memdup(p->f->arena, l.v, sizeof(void *) * (size_t)l.n) : NULL;
}

static dg_stmt *block_stmt(parser *p, int indent) {
  tok *kw = next(p);
  nest(p, kw, 1);
  tok *nt = expect_ident(p, "a block name");
  dg_block *b = ir_block_new(p->f, tok_str(p, nt));
  define(p, NS_BLOCK, nt, b);
  int mark = p->nscope;
  plist iters = {0}, ents = {0};
  if (accept(p, "(")) {
    if (!is_p(peek(p), ")")) {
      for (;;) {
        tok *vn = expect_ident(p, "an iteration variable name");
        entry *e;
        dg_iter *it = DG_ANEW(p->tmp, dg_iter);
        it->var = define_var(p, vn, &e);
        expect(p, ":", "after the iteration variable");
        tok *kt = peek(p);
        if (is_kw(kt, "S")) it->kind = DG_ITER_SPATIAL;
        else if (is_kw(kt, "R")) it->kind = DG_ITER_REDUCE;
        else {
          char d[64];
          FAIL(p, kt, "expected 'S' (spatial) or 'R' (reduce), found %s", describe(kt, d, sizeof d));
        }
        next(p);
        expect(p, "(", "before the iteration extent");
        it->extent = plain_int(p, "an iteration extent", 1, INT64_MAX);
        expect(p, ")", "after the iteration extent");
        expect(p, "=", "before the binding");
        tok *bt = peek(p);
        pexpr bind = parse_expr(p);
        if (bind.e->dtype != DG_I32)
          FAIL(p, bt, "the binding of '%s' must be an i32 expression, found %s", it->var->name, dt(bind.e->dtype));
        it->binding = bind.e;
        plist_push(p, &iters, it);
        plist_push(p, &ents, e);
        if (!accept(p, ",")) break;
      }
    }
    expect(p, ")", "after the iteration variables");
  }
  expect(p, ":", "at the end of the block header");
  expect_eol(p, "the block header");
  b->n_iters = iters.n;
  b->iters = DG_ANEWN(p->f->arena, dg_iter, iters.n ? iters.n : 1);
  for (int i = 0; i < iters.n; i++) {
    b->iters[i] = *(dg_iter *)iters.v[i];
    show(p, ents.v[i]);
  }
  int bi = body_indent(p, indent);
  if (bi >= 0) {
    prescan_allocs(p, b, bi);
    plist stmts = {0};
    while (peek(p)->k != T_EOF && peek(p)->indent == bi) {
      tok *t = peek(p);
      if (!(is_header_word(t) && !is_p(peek2(p), "["))) {
        plist_push(p, &stmts, statement(p, bi));
        continue;
      }
      if (stmts.n) FAIL(p, t, "'%.*s' must come before the block's statements", t->len, t->s);
      if (is_kw(t, "reads")) {
        regions(p, &b->reads, &b->n_reads);
      } else if (is_kw(t, "writes")) {
        regions(p, &b->writes, &b->n_writes);
      } else if (is_kw(t, "where")) {
        if (b->predicate) FAIL(p, t, "block '%s' has two 'where' lines", b->name);
        next(p);
        b->predicate = typed_expr(p, DG_BOOL, "the block predicate");
        expect_eol(p, "the predicate");
      } else if (is_kw(t, "alloc")) {
        skip_line(p); /* parsed by prescan_allocs */
      } else if (is_kw(t, "attr")) {
        next(p);
        ann(p, &b->anns);
        expect_eol(p, "the attribute");
      } else {
        if (b->init) FAIL(p, t, "block '%s' has two 'init:' parts", b->name);
        next(p);
        expect(p, ":", "after 'init'");
        expect_eol(p, "'init:'");
        b->init = body(p, bi);
      }
    }
    check_no_deeper(p, bi);
    b->body = as_stmt(p, &stmts);
  }
  hide_to(p, mark);
  p->sdepth--;
  return ir_block_stmt(p->f, b);
}

static dg_stmt *statement(parser *p, int indent) {
  char d[64];
  tok *t = peek(p);
  if (t->k == T_IDENT && is_p(peek2(p), "[")) return store(p);
  if (is_kw(t, "for")) return for_stmt(p, indent);
  if (is_kw(t, "block")) return block_stmt(p, indent);
  if (is_kw(t, "if")) return if_stmt(p, indent);
  if (is_kw(t, "else") || is_kw(t, "elif")) FAIL(p, t, "'%.*s' without a matching 'if'", t->len, t->s);
  if (is_header_word(t))
    FAIL(p, t, "'%.*s' lines belong at the start of a block, before its statements", t->len, t->s);
  FAIL(p, t, "expected a statement (for, block, if or Buf[...] = value), found %s", describe(t, d, sizeof d));
}

/* ---- kernel -------------------------------------------------------------- */

static void kernel(parser *p) {
  tok *t = peek(p);
  if (t->k != T_EOF && t->indent != 0)
    FAIL(p, t, "unexpected indentation (the kernel line starts at column 1)");
  expect_kw(p, "kernel", "at the start of the text");
  tok *name = expect_ident(p, "the kernel name");
  p->f->name = dg_arena_strndup(p->f->arena, name->s, (size_t)name->len);
  expect(p, "(", "after the kernel name");
  plist params = {0};
  int64_t param_bytes = 0; /* each <= WL_MAX_BYTES: the sum cannot overflow */
  if (!is_p(peek(p), ")")) {
    for (;;) {
      tok *n = expect_ident(p, "a parameter name");
      dg_buffer *b = buffer_decl(p, n);
      param_bytes += ir_buffer_numel(b) * dg_dtype_bytes(b->dtype);
      if (param_bytes > WL_MAX_BYTES)
        FAIL(p, n, "the parameters up to '%.*s' take %.1f MiB, more than the limit of %lld MiB "
                   "(WL_MAX_BYTES)",
             n->len > 40 ? 40 : n->len, n->s, (double)param_bytes / (1 << 20),
             (long long)(WL_MAX_BYTES >> 20));
      show(p, define(p, NS_BUF, n, b));
      plist_push(p, &params, b);
      if (!accept(p, ",")) break;
    }
  }
  expect(p, ")", "after the parameters");
  expect(p, ":", "at the end of the kernel line");
  expect_eol(p, "the kernel line");
  p->f->n_params = params.n;
  p->f->params = params.n ? dg_arena_memdup(p->f->arena, params.v, sizeof(void *) * (size_t)params.n) : NULL;
  dg_stmt *s = body(p, 0);
  t = peek(p);
  if (t->k != T_EOF) {
    char d[64];
    FAIL(p, t, "expected end of input (one kernel per text), found %s", describe(t, d, sizeof d));
  }
  if (s && s->kind == DG_STMT_BLOCK && strcmp(s->block->name, "root") == 0) {
    p->f->body = s;
    return;
  }
  /* a body without its root block gets one */
  entry *root = lookup(p, NS_BLOCK, &(tok){.k = T_IDENT, .s = "root", .len = 4});
  if (root) fail_at(p, root->line, root->col, "block 'root' must be the whole kernel body");
  dg_block *b = ir_block_new(p->f, "root");
  b->body = s;
  p->f->body = ir_block_stmt(p->f, b);
}

dg_func *ir_parse(const char *text, const char *filename, dg_status *st) {
  parser *p = dg_calloc(1, sizeof *p);
  p->file = filename ? filename : "<input>";
  p->st = st;
  p->tmp = dg_arena_new();
  p->f = ir_func_new("main");
  dg_func *volatile result = NULL;
  if (setjmp(p->jb) == 0) {
    lex(p, text ? text : "");
    kernel(p);
    result = p->f;
    dg_status_ok(st);
  } else {
    ir_func_free(p->f);
  }
  dg_arena_free(p->tmp);
  free(p);
  return result;
}
