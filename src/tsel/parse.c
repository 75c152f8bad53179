/* parse.c: TSEL text -> graph. A hand-written scanner over one line at a
 * time; every error is "FILE:line:col: message" at the first byte that is
 * wrong. It checks the lexical form only (the header, dense edit ids, single
 * spaces, no trailing spaces, well-formed operands, keywords after
 * positional operands, why/expect shape); types, references and kernel facts
 * are the checker's. The text is UTF-8, and so is every string once its
 * escapes are decoded (a lowered trace must load as JSON). Bytes after a NUL
 * are ignored; lists nest at most 16 deep; numbers must fit int64 / double. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>

#include "tsel/tsel_impl.h"

typedef struct {
  tsel_graph *g;
  const char *filename;
  const char *line; /* start of the current line */
  size_t len;       /* its length without the newline */
  int lineno;
  size_t pos;
  dg_status *st;
} parser;

static bool perr(parser *p, size_t pos, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool perr(parser *p, size_t pos, const char *fmt, ...) {
  char msg[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (p->filename)
    return dg_fail(p->st, DG_ERR_PARSE, "%s:%d:%zu: %s", p->filename, p->lineno, pos + 1, msg);
  return dg_fail(p->st, DG_ERR_PARSE, "%d:%zu: %s", p->lineno, pos + 1, msg);
}

int tsel_utf8_len(const unsigned char *s, size_t n) {
  if (n == 0) return 0;
  unsigned c = s[0];
  if (c < 0x80) return 1;
  int len;
  unsigned lo = 0x80, hi = 0xbf; /* the range of the second byte */
  if (c >= 0xc2 && c <= 0xdf) len = 2;
  else if (c >= 0xe0 && c <= 0xef) {
    len = 3;
    if (c == 0xe0) lo = 0xa0;      /* overlong */
    else if (c == 0xed) hi = 0x9f; /* surrogates */
  } else if (c >= 0xf0 && c <= 0xf4) {
    len = 4;
    if (c == 0xf0) lo = 0x90;      /* overlong */
    else if (c == 0xf4) hi = 0x8f; /* past U+10FFFF */
  } else
    return 0; /* a continuation byte, an overlong 0xc0/0xc1, or 0xf5.. */
  if ((size_t)len > n || s[1] < lo || s[1] > hi) return 0;
  for (int i = 2; i < len; i++)
    if (s[i] < 0x80 || s[i] > 0xbf) return 0;
  return len;
}

size_t tsel_utf8_bad(const char *s, size_t n) {
  const unsigned char *u = (const unsigned char *)s;
  for (size_t i = 0; i < n;) {
    int k = tsel_utf8_len(u + i, n - i);
    if (k == 0) return i;
    i += (size_t)k;
  }
  return n;
}

static int cur(const parser *p) { return p->pos < p->len ? (unsigned char)p->line[p->pos] : -1; }

static bool is_word_char(int c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.';
}

/* After an operand: end of line, ']' (in a list) or one space then more. */
static bool after_operand(parser *p, bool in_list) {
  int c = cur(p);
  if (c < 0 || (in_list && c == ']')) return true;
  if (c != ' ') {
    if (c == ' ' || c == '\t' || c == '\r') return perr(p, p->pos, "expected a single space");
    return perr(p, p->pos, "unexpected '%c' after an operand", c);
  }
  if (p->pos + 1 >= p->len) return perr(p, p->pos, "trailing space");
  int n = (unsigned char)p->line[p->pos + 1];
  if (n == ' ' || n == '\t') return perr(p, p->pos + 1, "expected a single space");
  if (in_list && n == ']') return perr(p, p->pos, "space before ']'");
  return true;
}

static bool parse_string(parser *p, tsel_val *v) {
  size_t start = p->pos;
  p->pos++; /* the quote */
  dg_str s;
  dg_str_init(&s);
  for (;;) {
    int c = cur(p);
    if (c < 0) {
      dg_str_free(&s);
      return perr(p, start, "unterminated string");
    }
    if (c == '"') {
      p->pos++;
      break;
    }
    if (c < 0x20 || c == 0x7f) {
      dg_str_free(&s);
      return perr(p, p->pos, "control byte 0x%02x in a string (write \\x%02x)", c, c);
    }
    if (c == '\\') {
      p->pos++;
      int e = cur(p);
      switch (e) {
        case '"': dg_str_putc(&s, '"'); break;
        case '\\': dg_str_putc(&s, '\\'); break;
        case 'n': dg_str_putc(&s, '\n'); break;
        case 't': dg_str_putc(&s, '\t'); break;
        case 'r': dg_str_putc(&s, '\r'); break;
        case 'x': {
          int val = 0;
          for (int k = 1; k <= 2; k++) {
            int h = p->pos + (size_t)k < p->len ? (unsigned char)p->line[p->pos + (size_t)k] : -1;
            int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : -1;
            if (d < 0) {
              dg_str_free(&s);
              return perr(p, p->pos - 1, "\\x needs two lowercase hex digits");
            }
            val = val * 16 + d;
          }
          if (val == 0) {
            dg_str_free(&s);
            return perr(p, p->pos - 1, "\\x00 is not allowed in a string");
          }
          dg_str_putc(&s, (char)val);
          p->pos += 2;
          break;
        }
        default:
          dg_str_free(&s);
          return perr(p, p->pos - 1, "unknown escape in a string");
      }
      p->pos++;
      continue;
    }
    dg_str_putc(&s, (char)c);
    p->pos++;
  }
  /* The raw bytes are UTF-8 (check_text); \x escapes can still make
   * an invalid sequence. The error is at the escape of the first bad byte. */
  size_t bad = tsel_utf8_bad(s.s ? s.s : "", s.len);
  if (bad < s.len) {
    unsigned char byte = (unsigned char)s.s[bad];
    dg_str_free(&s);
    size_t at = start + 1;
    for (size_t k = 0; k < bad; k++) at += p->line[at] != '\\' ? 1 : p->line[at + 1] == 'x' ? 4 : 2;
    return perr(p, at, "\\x%02x makes the string invalid UTF-8 (strings are UTF-8 text)", byte);
  }
  v->kind = TV_STR;
  v->s = dg_arena_strndup(p->g->arena, s.s ? s.s : "", s.len);
  dg_str_free(&s);
  return true;
}

static bool parse_number(parser *p, tsel_val *v) {
  size_t start = p->pos;
  size_t i = p->pos;
  if (p->line[i] == '-') i++;
  if (i + 3 <= p->len && memcmp(p->line + i, "inf", 3) == 0 &&
      (i + 3 == p->len || !is_word_char((unsigned char)p->line[i + 3]))) {
    v->kind = TV_FLOAT;
    v->f = p->line[start] == '-' ? -INFINITY : INFINITY;
    p->pos = i + 3;
    return true;
  }
  size_t digits = i;
  while (i < p->len && p->line[i] >= '0' && p->line[i] <= '9') i++;
  if (i == digits) return perr(p, start, "expected a number");
  bool is_float = false;
  if (i < p->len && p->line[i] == '.') {
    is_float = true;
    i++;
    size_t d = i;
    while (i < p->len && p->line[i] >= '0' && p->line[i] <= '9') i++;
    if (i == d) return perr(p, i, "expected digits after '.'");
  }
  if (i < p->len && (p->line[i] == 'e' || p->line[i] == 'E')) {
    is_float = true;
    i++;
    if (i < p->len && (p->line[i] == '+' || p->line[i] == '-')) i++;
    size_t d = i;
    while (i < p->len && p->line[i] >= '0' && p->line[i] <= '9') i++;
    if (i == d) return perr(p, i, "expected digits in the exponent");
  }
  if (i < p->len && is_word_char((unsigned char)p->line[i]))
    return perr(p, i, "unexpected '%c' in a number", p->line[i]);
  char buf[80];
  size_t n = i - start;
  if (n >= sizeof buf) return perr(p, start, "number too long");
  memcpy(buf, p->line + start, n);
  buf[n] = 0;
  errno = 0;
  if (is_float) {
    v->kind = TV_FLOAT;
    v->f = strtod(buf, NULL);
    if (errno == ERANGE && isinf(v->f)) return perr(p, start, "float out of range (write inf)");
  } else {
    v->kind = TV_INT;
    v->i = strtoll(buf, NULL, 10);
    if (errno == ERANGE) return perr(p, start, "integer out of range");
  }
  p->pos = i;
  return true;
}

static bool all_digits(const char *s, size_t n) {
  if (n == 0 || n > 9) return false;
  for (size_t i = 0; i < n; i++)
    if (s[i] < '0' || s[i] > '9') return false;
  return true;
}

/* A bare word: ref, count, bool, nan or a word. */
static bool classify_word(parser *p, size_t start, size_t n, tsel_val *v) {
  const char *w = p->line + start;
  const char *dot = memchr(w, '.', n);
  if (w[0] == 't' && n > 1 && w[1] >= '0' && w[1] <= '9') {
    size_t idn = dot ? (size_t)(dot - w) - 1 : n - 1;
    if (!all_digits(w + 1, idn) || (w[1] == '0'))
      return perr(p, start, "malformed reference '%.*s' (write tN or tN.K)", (int)n, w);
    v->kind = TV_REF;
    v->i = strtol(w + 1, NULL, 10);
    v->sub = -1;
    if (dot) {
      size_t kn = n - (size_t)(dot - w) - 1;
      if (!all_digits(dot + 1, kn) || (kn > 1 && dot[1] == '0'))
        return perr(p, start, "malformed reference '%.*s' (write tN or tN.K)", (int)n, w);
      v->sub = (int)strtol(dot + 1, NULL, 10);
    }
    return true;
  }
  if (w[0] == 'x' && n > 1 && w[1] >= '0' && w[1] <= '9') {
    if (!all_digits(w + 1, n - 1) || (n > 2 && w[1] == '0'))
      return perr(p, start, "malformed count '%.*s' (write xN)", (int)n, w);
    v->kind = TV_COUNT;
    v->i = strtol(w + 1, NULL, 10);
    return true;
  }
  if (n == 4 && memcmp(w, "true", 4) == 0) {
    v->kind = TV_BOOL;
    v->i = 1;
  } else if (n == 5 && memcmp(w, "false", 5) == 0) {
    v->kind = TV_BOOL;
    v->i = 0;
  } else if (n == 3 && memcmp(w, "nan", 3) == 0) {
    v->kind = TV_FLOAT;
    v->f = NAN;
  } else if (n == 1 && w[0] == '_') {
    v->kind = TV_NONE;
  } else {
    v->kind = TV_WORD;
    v->s = dg_arena_strndup(p->g->arena, w, n);
  }
  return true;
}

static bool parse_operand(parser *p, tsel_val *v, int depth);

static bool parse_list(parser *p, tsel_val *v, int depth) {
  size_t start = p->pos;
  if (depth >= 16) return perr(p, start, "lists nest at most 16 deep");
  p->pos++;
  DG_VEC(tsel_val) items = {0};
  if (cur(p) == ' ') {
    free(items.data);
    return perr(p, p->pos, "space after '['");
  }
  while (cur(p) != ']') {
    if (cur(p) < 0) {
      free(items.data);
      return perr(p, start, "unterminated list");
    }
    tsel_val it;
    if (!parse_operand(p, &it, depth + 1) || !after_operand(p, true)) {
      free(items.data);
      return false;
    }
    DG_VEC_PUSH(&items, it);
    if (cur(p) == ' ') p->pos++;
  }
  p->pos++;
  v->kind = TV_LIST;
  v->n = (int)items.len;
  v->items = DG_ANEWN(p->g->arena, tsel_val, items.len ? items.len : 1);
  if (items.len) memcpy(v->items, items.data, sizeof(tsel_val) * items.len);
  free(items.data);
  return true;
}

static bool parse_operand(parser *p, tsel_val *v, int depth) {
  memset(v, 0, sizeof *v);
  v->line = p->lineno;
  v->col = (int)p->pos + 1;
  int c = cur(p);
  if (c == '[') return parse_list(p, v, depth);
  if (c == '"') return parse_string(p, v);
  if (c == '-' || (c >= '0' && c <= '9')) return parse_number(p, v);
  if (c >= 0 && is_word_char(c)) {
    size_t start = p->pos;
    while (is_word_char(cur(p))) p->pos++;
    return classify_word(p, start, p->pos - start, v);
  }
  if (c < 0) return perr(p, p->pos, "expected an operand");
  return perr(p, p->pos, "unexpected '%c'", c);
}

static bool parse_edit(parser *p) {
  tsel_graph *g = p->g;
  size_t i = 1;
  while (i < p->len && p->line[i] >= '0' && p->line[i] <= '9') i++;
  int want = g->n_edits + 1;
  char idbuf[32];
  snprintf(idbuf, sizeof idbuf, "t%d", want);
  if (i - 1 > 9 || strlen(idbuf) != i || memcmp(idbuf, p->line, i) != 0)
    return perr(p, 0, "expected edit id %s, found '%.*s' (edits are numbered t1, t2, ... in order)",
                idbuf, (int)(i > 20 ? 20 : i), p->line);
  tsel_edit e;
  memset(&e, 0, sizeof e);
  e.line = p->lineno;
  e.col = 1;
  if (i >= p->len || p->line[i] != ' ') return perr(p, i, "expected ' ' and an edit after %s", idbuf);
  p->pos = i + 1;
  size_t os = p->pos;
  while (p->pos < p->len && ((p->line[p->pos] >= 'a' && p->line[p->pos] <= 'z') || p->line[p->pos] == '_'))
    p->pos++;
  e.op_col = (int)os + 1;
  if (p->pos == os) return perr(p, os, "expected an edit name");
  if (!tsel_op_from_name(p->line + os, p->pos - os, &e.op))
    return perr(p, os, "unknown edit '%.*s'", (int)(p->pos - os), p->line + os);
  if (!after_operand(p, false)) return false;
  DG_VEC(tsel_val) args = {0};
  DG_VEC(tsel_kw) kws = {0};
  bool ok = true;
  while (ok && cur(p) == ' ') {
    p->pos++;
    size_t ts = p->pos;
    size_t k = p->pos;
    while (k < p->len && ((p->line[k] >= 'a' && p->line[k] <= 'z') || p->line[k] == '_')) k++;
    if (k < p->len && p->line[k] == '=') { /* keyword (empty key: =V) */
      tsel_kw kw = {.key = dg_arena_strndup(g->arena, p->line + ts, k - ts),
                    .line = p->lineno,
                    .col = (int)ts + 1};
      for (size_t q = 0; q < kws.len; q++)
        if (strcmp(kws.data[q].key, kw.key) == 0) {
          ok = perr(p, ts, "keyword '%s=' given twice", kw.key);
          break;
        }
      if (!ok) break;
      p->pos = k + 1;
      if (cur(p) < 0 || cur(p) == ' ') {
        ok = perr(p, p->pos, "expected a value after '='");
        break;
      }
      ok = parse_operand(p, &kw.val, 0) && after_operand(p, false);
      if (ok) DG_VEC_PUSH(&kws, kw);
    } else {
      if (kws.len) {
        ok = perr(p, ts, "positional operand after keywords");
        break;
      }
      tsel_val v;
      ok = parse_operand(p, &v, 0) && after_operand(p, false);
      if (ok) DG_VEC_PUSH(&args, v);
    }
  }
  if (ok) {
    e.args = args.data;
    e.n_args = (int)args.len;
    e.kws = kws.data;
    e.n_kws = (int)kws.len;
    tsel_graph_add_edit(g, &e);
    g->lines[g->n_lines - 1].line = p->lineno;
  }
  free(args.data);
  free(kws.data);
  return ok;
}

static bool parse_why(parser *p) {
  tsel_graph *g = p->g;
  DG_VEC(int) refs = {0};
  DG_VEC(int) cols = {0};
  p->pos = 3;
  bool ok = true;
  for (;;) {
    if (cur(p) != ' ') {
      ok = perr(p, p->pos, "expected ' ' and an edit id");
      break;
    }
    p->pos++;
    size_t s = p->pos;
    if (cur(p) != 't') {
      ok = perr(p, s, "expected an edit id tN");
      break;
    }
    p->pos++;
    while (cur(p) >= '0' && cur(p) <= '9') p->pos++;
    if (!all_digits(p->line + s + 1, p->pos - s - 1) || p->line[s + 1] == '0') {
      ok = perr(p, s, "expected an edit id tN");
      break;
    }
    DG_VEC_PUSH(&refs, (int)strtol(p->line + s + 1, NULL, 10));
    DG_VEC_PUSH(&cols, (int)s + 1);
    if (cur(p) == ':') break;
  }
  if (ok) {
    p->pos++;
    if (cur(p) != ' ' || p->pos + 1 >= p->len)
      ok = perr(p, p->pos, "expected ': ' and an explanation");
  }
  if (ok) {
    tsel_graph_add_why(g, refs.data, (int)refs.len, "");
    tsel_line *l = &g->lines[g->n_lines - 1];
    l->text = dg_arena_strndup(g->arena, p->line + p->pos + 1, p->len - p->pos - 1);
    memcpy(l->ref_cols, cols.data, sizeof(int) * cols.len);
    l->line = p->lineno;
  }
  free(refs.data);
  free(cols.data);
  return ok;
}

static bool parse_expect(parser *p) {
  tsel_graph *g = p->g;
  size_t s = 7;
  if (p->len < 9 || p->line[s] != 'p') return perr(p, s, "expected p1, p2, ... after 'expect '");
  size_t i = s + 1;
  while (i < p->len && p->line[i] >= '0' && p->line[i] <= '9') i++;
  int want = 1;
  for (int k = 0; k < g->n_lines; k++)
    if (g->lines[k].kind == TL_EXPECT) want++;
  char buf[32];
  snprintf(buf, sizeof buf, "p%d", want);
  if (strlen(buf) != i - s || memcmp(buf, p->line + s, i - s) != 0)
    return perr(p, s, "expected %s (expect lines are numbered p1, p2, ... in order)", buf);
  if (i + 2 > p->len || p->line[i] != ':' || p->line[i + 1] != ' ' || i + 2 >= p->len)
    return perr(p, i, "expected ': ' and an expected effect");
  tsel_graph_add_expect(g, "");
  tsel_line *l = &g->lines[g->n_lines - 1];
  l->text = dg_arena_strndup(g->arena, p->line + i + 2, p->len - i - 2);
  l->line = p->lineno;
  return true;
}

static bool check_text(parser *p) {
  for (size_t i = 0; i < p->len; i++) {
    unsigned char c = (unsigned char)p->line[i];
    if (c == '\r') return perr(p, i, "carriage return (lines end with \\n alone)");
  }
  size_t bad = tsel_utf8_bad(p->line, p->len);
  if (bad < p->len)
    return perr(p, bad, "byte 0x%02x is not valid UTF-8 (TSEL text is UTF-8)",
                (unsigned char)p->line[bad]);
  if (p->len > 0 && (p->line[p->len - 1] == ' ' || p->line[p->len - 1] == '\t'))
    return perr(p, p->len - 1, "trailing space");
  return true;
}

tsel_graph *tsel_parse(const char *text, const char *filename, dg_status *st) {
  dg_status_ok(st);
  parser p = {.filename = filename, .st = st};
  const char *s = text;
  const char *end = text + strlen(text);
  bool ok = true;
  for (p.lineno = 1; ok && s < end; p.lineno++) {
    const char *nl = memchr(s, '\n', (size_t)(end - s));
    p.line = s;
    p.len = nl ? (size_t)(nl - s) : (size_t)(end - s);
    p.pos = 0;
    s = nl ? nl + 1 : end;
    if (!check_text(&p)) {
      ok = false;
      break;
    }
    if (p.lineno == 1) {
      static const char head[] = "tsel ";
      if (p.len < 5 || memcmp(p.line, head, 5) != 0) {
        ok = perr(&p, 0, "expected 'tsel 1 kernel SPEC' on the first line");
        break;
      }
      size_t i = 5;
      while (i < p.len && p.line[i] != ' ') i++;
      if (i - 5 != 1 || p.line[5] != '1') {
        ok = perr(&p, 5, "unsupported TSEL version '%.*s' (this build reads version 1)",
                  (int)(i - 5 > 20 ? 20 : i - 5), p.line + 5);
        break;
      }
      if (p.len < 15 || memcmp(p.line + 6, " kernel ", 8) != 0) {
        ok = perr(&p, 6, "expected ' kernel SPEC' after the version");
        break;
      }
      const char *sp = memchr(p.line + 14, ' ', p.len - 14);
      if (sp) {
        ok = perr(&p, (size_t)(sp - p.line), "the kernel spec has no spaces");
        break;
      }
      p.g = tsel_graph_new("");
      p.g->kernel = dg_arena_strndup(p.g->arena, p.line + 14, p.len - 14);
      p.g->filename = filename ? dg_arena_strdup(p.g->arena, filename) : NULL;
      continue;
    }
    if (p.len == 0) {
      ok = perr(&p, 0, "empty line");
    } else if (p.line[0] == '#') {
      tsel_line *l;
      tsel_graph_add_why(p.g, NULL, 0, "");
      l = &p.g->lines[p.g->n_lines - 1];
      l->kind = TL_COMMENT;
      l->text = dg_arena_strndup(p.g->arena, p.line + 1, p.len - 1);
      l->line = p.lineno;
    } else if (p.line[0] == 't' && p.len > 1 && p.line[1] >= '0' && p.line[1] <= '9') {
      ok = parse_edit(&p);
    } else if (p.len >= 3 && memcmp(p.line, "why", 3) == 0) {
      ok = parse_why(&p);
    } else if (p.len >= 7 && memcmp(p.line, "expect ", 7) == 0) {
      ok = parse_expect(&p);
    } else {
      ok = perr(&p, 0, "expected an edit (tN ...), 'why', 'expect' or '#'");
    }
  }
  if (ok && !p.g) {
    p.lineno = 1;
    p.line = "";
    p.len = 0;
    ok = perr(&p, 0, "empty document (expected 'tsel 1 kernel SPEC')");
  }
  if (!ok) {
    tsel_graph_free(p.g);
    return NULL;
  }
  return p.g;
}
