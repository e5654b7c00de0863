#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/expr.h"
#include "core/vec.h"

/* Trees taller than this are refused so that recursive walks stay shallow. */
#define EXPR_MAX_HEIGHT 1000

static uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h;
}

static hcq_expr_t *node_new(hcq_expr_op_t op) {
  hcq_expr_t *e = calloc(1, sizeof(*e));
  if (!e) return NULL;
  atomic_init(&e->refs, 1);
  e->op = op;
  e->height = 1;
  return e;
}

static bool valid_identifier(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n > HCQ_VAR_NAME_MAX) return false;
  if (!(isalpha((unsigned char)s[0]) || s[0] == '_')) return false;
  for (size_t i = 1; i < n; i++)
    if (!(isalnum((unsigned char)s[i]) || s[i] == '_')) return false;
  return strcmp(s, "min") != 0 && strcmp(s, "max") != 0;
}

hcq_status_t hcq_var_create(const char *name, int64_t min, int64_t max, hcq_expr_t **out_var) {
  if (!out_var) return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_var_create: out_var is NULL");
  *out_var = NULL;
  if (!name || !valid_identifier(name))
    return hcq_status_make(
        HCQ_INVALID_ARGUMENT,
        "variable name \"%s\" is not an identifier of at most %d characters (and not min/max)",
        name ? name : "(null)", HCQ_VAR_NAME_MAX);
  if (min > max)
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "variable %s: min %" PRId64 " is greater than max %" PRId64, name, min,
                           max);
  hcq_expr_t *e = node_new(HCQ_EXPR_VAR);
  if (!e) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory creating variable %s", name);
  e->u.var.min = min;
  e->u.var.max = max;
  strcpy(e->u.var.name, name);
  /* Variables are compared by identity, so the hash may use the address. */
  e->hash = mix(0x51ed27, (uint64_t)(uintptr_t)e);
  *out_var = e;
  return NULL;
}

hcq_expr_t *hcq_expr_const(int64_t value) {
  hcq_expr_t *e = node_new(HCQ_EXPR_CONST);
  if (!e) return NULL;
  e->u.value = value;
  e->hash = mix(0xc0457, (uint64_t)value);
  return e;
}

hcq_expr_t *hcq_expr_retain(const hcq_expr_t *e) {
  if (!e) return NULL;
  hcq_expr_t *m = (hcq_expr_t *)e;
  atomic_fetch_add_explicit(&m->refs, 1, memory_order_relaxed);
  return m;
}

void hcq_expr_release(const hcq_expr_t *e) {
  if (!e) return;
  hcq_expr_t *m = (hcq_expr_t *)e;
  if (atomic_fetch_sub_explicit(&m->refs, 1, memory_order_acq_rel) != 1) return;
  if (m->op != HCQ_EXPR_CONST && m->op != HCQ_EXPR_VAR) {
    hcq_expr_release(m->u.kids.a);
    hcq_expr_release(m->u.kids.b);
  }
  free(m);
}

static hcq_expr_t *make_node(hcq_expr_op_t op, const hcq_expr_t *a, const hcq_expr_t *b) {
  uint32_t h = a->height;
  if (b && b->height > h) h = b->height;
  if (h + 1 > EXPR_MAX_HEIGHT) return NULL;
  hcq_expr_t *e = node_new(op);
  if (!e) return NULL;
  e->height = h + 1;
  e->u.kids.a = hcq_expr_retain(a);
  e->u.kids.b = b ? hcq_expr_retain(b) : NULL;
  e->hash = mix(mix((uint64_t)op * 0x100000001b3ull, a->hash), b ? b->hash : 0);
  return e;
}

hcq_expr_t *hcq_expr_neg(const hcq_expr_t *a) {
  if (!a) return NULL;
  int64_t v;
  if (a->op == HCQ_EXPR_CONST && hcq__arith(HCQ_EXPR_NEG, a->u.value, 0, &v) == HCQ__ARITH_OK)
    return hcq_expr_const(v);
  return make_node(HCQ_EXPR_NEG, a, NULL);
}

hcq_expr_t *hcq_expr_binary(hcq_expr_op_t op, const hcq_expr_t *a, const hcq_expr_t *b) {
  if (!a || !b) return NULL;
  if (op < HCQ_EXPR_ADD || op > HCQ_EXPR_MAX) return NULL;
  int64_t v;
  if (a->op == HCQ_EXPR_CONST && b->op == HCQ_EXPR_CONST &&
      hcq__arith(op, a->u.value, b->u.value, &v) == HCQ__ARITH_OK)
    return hcq_expr_const(v);
  return make_node(op, a, b);
}

hcq_expr_op_t hcq_expr_op(const hcq_expr_t *e) { return e ? e->op : HCQ_EXPR_CONST; }
bool hcq_expr_is_const(const hcq_expr_t *e) { return e && e->op == HCQ_EXPR_CONST; }
int64_t hcq_expr_const_value(const hcq_expr_t *e) {
  return e && e->op == HCQ_EXPR_CONST ? e->u.value : 0;
}
const char *hcq_var_name(const hcq_expr_t *v) {
  return v && v->op == HCQ_EXPR_VAR ? v->u.var.name : NULL;
}
int64_t hcq_var_min(const hcq_expr_t *v) { return v && v->op == HCQ_EXPR_VAR ? v->u.var.min : 0; }
int64_t hcq_var_max(const hcq_expr_t *v) { return v && v->op == HCQ_EXPR_VAR ? v->u.var.max : 0; }

bool hcq_expr_equal(const hcq_expr_t *a, const hcq_expr_t *b) {
  if (a == b) return true;
  if (!a || !b || a->op != b->op || a->hash != b->hash) return false;
  switch (a->op) {
    case HCQ_EXPR_CONST: return a->u.value == b->u.value;
    case HCQ_EXPR_VAR: return false; /* identity only */
    case HCQ_EXPR_NEG: return hcq_expr_equal(a->u.kids.a, b->u.kids.a);
    default:
      return hcq_expr_equal(a->u.kids.a, b->u.kids.a) && hcq_expr_equal(a->u.kids.b, b->u.kids.b);
  }
}

typedef HCQ__VEC(const hcq_expr_t *) expr_vec_t;

/* Appends the distinct variables of e to out; false when memory runs out. */
static bool collect_vars(const hcq_expr_t *e, expr_vec_t *out) {
  if (e->op == HCQ_EXPR_CONST) return true;
  if (e->op == HCQ_EXPR_VAR) {
    for (size_t i = 0; i < out->len; i++)
      if (out->data[i] == e) return true;
    return hcq__vec_push(out, e);
  }
  if (!collect_vars(e->u.kids.a, out)) return false;
  return e->op == HCQ_EXPR_NEG || collect_vars(e->u.kids.b, out);
}

size_t hcq_expr_vars(const hcq_expr_t *e, const hcq_expr_t **out_vars, size_t cap) {
  if (!e) return 0;
  expr_vec_t vars = {0};
  if (!collect_vars(e, &vars)) {
    hcq__vec_free(&vars);
    return 0;
  }
  size_t n = vars.len;
  for (size_t i = 0; i < n && i < cap && out_vars; i++) out_vars[i] = vars.data[i];
  hcq__vec_free(&vars);
  return n;
}

/* ---- formatting ---- */

typedef struct {
  char *buf;
  size_t size, len;
} strbuf_t;

static void sb_put(strbuf_t *sb, const char *s) {
  size_t n = strlen(s);
  if (sb->len < sb->size) {
    size_t room = sb->size - sb->len - 1;
    memcpy(sb->buf + sb->len, s, n < room ? n : room);
    sb->buf[sb->len + (n < room ? n : room)] = '\0';
  }
  sb->len += n;
}

static int precedence(hcq_expr_op_t op) {
  switch (op) {
    case HCQ_EXPR_ADD:
    case HCQ_EXPR_SUB: return 1;
    case HCQ_EXPR_MUL:
    case HCQ_EXPR_FLOORDIV:
    case HCQ_EXPR_MOD: return 2;
    case HCQ_EXPR_NEG: return 3;
    default: return 4;
  }
}

static void format_rec(const hcq_expr_t *e, strbuf_t *sb) {
  char tmp[32];
  switch (e->op) {
    case HCQ_EXPR_CONST:
      snprintf(tmp, sizeof(tmp), e->u.value < 0 ? "(%" PRId64 ")" : "%" PRId64, e->u.value);
      sb_put(sb, tmp);
      return;
    case HCQ_EXPR_VAR: sb_put(sb, e->u.var.name); return;
    case HCQ_EXPR_NEG:
      sb_put(sb, "-");
      if (precedence(e->u.kids.a->op) < 3) sb_put(sb, "(");
      format_rec(e->u.kids.a, sb);
      if (precedence(e->u.kids.a->op) < 3) sb_put(sb, ")");
      return;
    case HCQ_EXPR_MIN:
    case HCQ_EXPR_MAX:
      sb_put(sb, e->op == HCQ_EXPR_MIN ? "min(" : "max(");
      format_rec(e->u.kids.a, sb);
      sb_put(sb, ",");
      format_rec(e->u.kids.b, sb);
      sb_put(sb, ")");
      return;
    default: break;
  }
  int p = precedence(e->op);
  const char *optext = e->op == HCQ_EXPR_ADD        ? "+"
                       : e->op == HCQ_EXPR_SUB      ? "-"
                       : e->op == HCQ_EXPR_MUL      ? "*"
                       : e->op == HCQ_EXPR_FLOORDIV ? "//"
                                                    : "%";
  bool lp = precedence(e->u.kids.a->op) < p;
  /* Left-associative: a right operand of equal precedence needs parentheses. */
  bool rp = precedence(e->u.kids.b->op) <= p;
  if (lp) sb_put(sb, "(");
  format_rec(e->u.kids.a, sb);
  if (lp) sb_put(sb, ")");
  sb_put(sb, optext);
  if (rp) sb_put(sb, "(");
  format_rec(e->u.kids.b, sb);
  if (rp) sb_put(sb, ")");
}

size_t hcq_expr_format(const hcq_expr_t *e, char *buf, size_t size) {
  strbuf_t sb = {buf, size, 0};
  if (buf && size) buf[0] = '\0';
  if (!e) {
    sb_put(&sb, "(null)");
    return sb.len;
  }
  format_rec(e, &sb);
  return sb.len;
}

/* ---- evaluation ---- */

typedef struct {
  const hcq_var_value_t *vals;
  size_t nvals;
  hcq_status_t err;
} eval_ctx_t;

hcq_status_t hcq_var_check(const hcq_expr_t *var, int64_t value) {
  if (!var || var->op != HCQ_EXPR_VAR)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "value bound to a non-variable");
  if (value < var->u.var.min || value > var->u.var.max)
    return hcq_status_make(HCQ_OUT_OF_RANGE,
                           "variable %s = %" PRId64 " is outside its range [%" PRId64 ", %" PRId64
                           "]",
                           var->u.var.name, value, var->u.var.min, var->u.var.max);
  return NULL;
}

static bool eval_rec(const hcq_expr_t *e, eval_ctx_t *ctx, int64_t *out) {
  switch (e->op) {
    case HCQ_EXPR_CONST: *out = e->u.value; return true;
    case HCQ_EXPR_VAR:
      for (size_t i = 0; i < ctx->nvals; i++) {
        if (ctx->vals[i].var != e) continue;
        if ((ctx->err = hcq_var_check(e, ctx->vals[i].value))) return false;
        *out = ctx->vals[i].value;
        return true;
      }
      ctx->err = hcq_status_make(HCQ_NOT_FOUND, "variable %s has no value", e->u.var.name);
      return false;
    default: break;
  }
  int64_t a, b = 0;
  if (!eval_rec(e->u.kids.a, ctx, &a)) return false;
  if (e->op != HCQ_EXPR_NEG && !eval_rec(e->u.kids.b, ctx, &b)) return false;
  hcq__arith_result_t r = hcq__arith(e->op, a, b, out);
  if (r == HCQ__ARITH_OK) return true;
  char text[256];
  hcq_expr_format(e, text, sizeof(text));
  if (r == HCQ__ARITH_DIV_ZERO)
    ctx->err = hcq_status_make(HCQ_OUT_OF_RANGE, "division by zero in %s", text);
  else
    ctx->err = hcq_status_make(HCQ_OUT_OF_RANGE, "64-bit overflow in %s", text);
  return false;
}

hcq_status_t hcq__var_values_check(const hcq_var_value_t *vals, size_t nvals, const char *what) {
  const char *sep = what ? ": " : "";
  if (!what) what = "";
  for (size_t i = 0; i < nvals; i++) {
    const hcq_expr_t *v = vals[i].var;
    if (!v)
      return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s%svalue %zu names no variable (NULL)", what,
                             sep, i);
    if (v->op != HCQ_EXPR_VAR)
      return hcq_status_make(HCQ_INVALID_ARGUMENT,
                             "%s%svalue %zu is for an expression that is not a variable", what, sep,
                             i);
    for (size_t j = 0; j < i; j++)
      if (vals[j].var == v)
        return hcq_status_make(HCQ_INVALID_ARGUMENT,
                               "%s%svariable %s has two values (values %zu and %zu)", what, sep,
                               v->u.var.name, j, i);
  }
  return NULL;
}

hcq_status_t hcq_expr_eval(const hcq_expr_t *e, const hcq_var_value_t *vals, size_t nvals,
                           int64_t *out_value) {
  if (!e || !out_value)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_expr_eval: expression or output is NULL");
  if (nvals && !vals)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_expr_eval: %zu values but vals is NULL",
                           nvals);
  eval_ctx_t ctx = {vals, nvals, NULL};
  int64_t v;
  if (!eval_rec(e, &ctx, &v)) return ctx.err;
  *out_value = v;
  return NULL;
}

/* ---- bounds ---- */

/* [lo, hi] of a op b over a in [alo, ahi], b in [blo, bhi], from the four corners; false when a
 * corner fails (overflow, division by zero). Exact for + - * min max, and for // when b keeps one
 * sign: a // b grows with a for any fixed b, and moves one way with b for any fixed a. */
static bool corners(hcq_expr_op_t op, int64_t alo, int64_t ahi, int64_t blo, int64_t bhi,
                    int64_t *lo, int64_t *hi) {
  const int64_t as[2] = {alo, ahi}, bs[2] = {blo, bhi};
  for (int i = 0; i < 4; i++) {
    int64_t v;
    if (hcq__arith(op, as[i / 2], bs[i % 2], &v) != HCQ__ARITH_OK) return false;
    if (i == 0 || v < *lo) *lo = v;
    if (i == 0 || v > *hi) *hi = v;
  }
  return true;
}

bool hcq__expr_bounds(const hcq_expr_t *e, int64_t *lo, int64_t *hi) {
  switch (e->op) {
    case HCQ_EXPR_CONST: *lo = *hi = e->u.value; return true;
    case HCQ_EXPR_VAR: *lo = e->u.var.min, *hi = e->u.var.max; return true;
    default: break;
  }
  int64_t alo, ahi, blo = 0, bhi = 0;
  if (!hcq__expr_bounds(e->u.kids.a, &alo, &ahi)) return false;
  if (e->op == HCQ_EXPR_NEG) {
    if (alo == INT64_MIN) return false;
    *lo = -ahi, *hi = -alo;
    return true;
  }
  if (!hcq__expr_bounds(e->u.kids.b, &blo, &bhi)) return false;
  switch (e->op) {
    case HCQ_EXPR_ADD:
    case HCQ_EXPR_MUL:
    case HCQ_EXPR_MIN:
    case HCQ_EXPR_MAX: return corners(e->op, alo, ahi, blo, bhi, lo, hi);
    case HCQ_EXPR_SUB:
      if (__builtin_sub_overflow(alo, bhi, lo) || __builtin_sub_overflow(ahi, blo, hi))
        return false;
      return true;
    case HCQ_EXPR_FLOORDIV:
      if (blo <= 0 && bhi >= 0) return false; /* the divisor may be 0 */
      return corners(e->op, alo, ahi, blo, bhi, lo, hi);
    case HCQ_EXPR_MOD:
      if (blo <= 0 && bhi >= 0) return false;
      if (blo > 0) {
        /* Floor modulo by a positive divisor: in [0, b - 1], or a itself when a is in [0, blo). */
        if (alo >= 0 && ahi < blo)
          *lo = alo, *hi = ahi;
        else
          *lo = 0, *hi = bhi - 1;
      } else {
        if (ahi <= 0 && alo > bhi)
          *lo = alo, *hi = ahi;
        else
          *lo = blo + 1, *hi = 0;
      }
      return true;
    default: return false;
  }
}

/* ---- parsing ---- */

#define PARSE_MAX_DEPTH 128

typedef struct {
  const char *text, *p;
  const hcq_expr_t *const *vars;
  size_t nvars;
  int depth;
  hcq_status_t err;
} parser_t;

static void skip_ws(parser_t *ps) {
  while (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r') ps->p++;
}

static hcq_expr_t *parse_fail(parser_t *ps, const char *what) {
  if (!ps->err) {
    char near[16];
    if (*ps->p)
      snprintf(near, sizeof(near), "\"%.1s\"", ps->p);
    else
      snprintf(near, sizeof(near), "end of text");
    ps->err = hcq_status_make(HCQ_INVALID_ARGUMENT, "expression \"%s\": %s at column %d (found %s)",
                              ps->text, what, (int)(ps->p - ps->text) + 1, near);
  }
  return NULL;
}

static hcq_expr_t *oom_fail(parser_t *ps) {
  if (!ps->err)
    ps->err = hcq_status_make(HCQ_OUT_OF_MEMORY,
                              "expression \"%s\": out of memory or nesting too deep", ps->text);
  return NULL;
}

static hcq_expr_t *parse_expr(parser_t *ps);

/* The height a op b would have, when it passes the limit (0 when it does not, or folds). */
static uint32_t too_tall(const hcq_expr_t *a, const hcq_expr_t *b) {
  if (a->op == HCQ_EXPR_CONST && b->op == HCQ_EXPR_CONST) return 0;
  uint32_t h = (a->height > b->height ? a->height : b->height) + 1;
  return h > EXPR_MAX_HEIGHT ? h : 0;
}

/* A chain of terms too long for the tree (n+n+...+n with more than EXPR_MAX_HEIGHT terms): the
 * rest of the chain is read, without building it, so the message says how long it is. next
 * parses one more operand after an operator of the chain (NULL: at the end of the chain). */
static hcq_expr_t *chain_fail(parser_t *ps, size_t terms, uint32_t height,
                              hcq_expr_t *(*next)(parser_t *), const char *noun) {
  for (hcq_expr_t *e; (e = next(ps));) {
    terms++;
    height = (e->height > height ? e->height : height) + 1;
    hcq_expr_release(e);
  }
  if (ps->err) return NULL;
  ps->err = hcq_status_make(HCQ_INVALID_ARGUMENT,
                            "expression \"%.48s%s\" is too long: %zu %s in a row make it %" PRIu32
                            " levels deep, the limit is %d (group them in parentheses)",
                            ps->text, strlen(ps->text) > 48 ? "..." : "", terms, noun, height,
                            EXPR_MAX_HEIGHT);
  return NULL;
}

static hcq_expr_t *parse_term(parser_t *ps);
static hcq_expr_t *parse_unary(parser_t *ps);

/* The next operand of a chain after its operator, or NULL at the chain's end (or on an error). */
static hcq_expr_t *next_term(parser_t *ps) {
  skip_ws(ps);
  if (*ps->p != '+' && *ps->p != '-') return NULL;
  ps->p++;
  return parse_term(ps);
}
static hcq_expr_t *next_factor(parser_t *ps) {
  skip_ws(ps);
  if (*ps->p == '*' || *ps->p == '%')
    ps->p++;
  else if (ps->p[0] == '/' && ps->p[1] == '/')
    ps->p += 2;
  else
    return NULL;
  return parse_unary(ps);
}
static hcq_expr_t *next_arg(parser_t *ps) {
  skip_ws(ps);
  if (*ps->p != ',') return NULL;
  ps->p++;
  return parse_expr(ps);
}

static hcq_expr_t *combine(parser_t *ps, hcq_expr_op_t op, hcq_expr_t *a, hcq_expr_t *b) {
  hcq_expr_t *r = hcq_expr_binary(op, a, b);
  hcq_expr_release(a);
  hcq_expr_release(b);
  return r ? r : oom_fail(ps);
}

/* A decimal integer at ps->p (a digit): it must fit int64_t and not run into a name ("2n"). */
static hcq_expr_t *parse_number(parser_t *ps) {
  const char *start = ps->p;
  uint64_t v = 0;
  while (isdigit((unsigned char)*ps->p)) {
    unsigned d = (unsigned)(*ps->p - '0');
    if (v > (UINT64_C(9223372036854775807) - d) / 10) {
      ps->p = start;
      return parse_fail(ps, "integer does not fit in 64 bits");
    }
    v = v * 10 + d;
    ps->p++;
  }
  if (isalpha((unsigned char)*ps->p) || *ps->p == '_')
    return parse_fail(ps, "unexpected character after number");
  hcq_expr_t *e = hcq_expr_const((int64_t)v);
  return e ? e : oom_fail(ps);
}

/* min(a, b, ...) or max(...) after its name: two arguments or more, folded left into a chain whose
 * height is bounded like a chain of terms. */
static hcq_expr_t *parse_min_max(parser_t *ps, bool is_min) {
  skip_ws(ps);
  if (*ps->p != '(') return parse_fail(ps, "expected '(' after min/max");
  ps->p++;
  hcq_expr_t *acc = parse_expr(ps);
  if (!acc) return NULL;
  int args = 1;
  for (;;) {
    skip_ws(ps);
    if (*ps->p == ')') break;
    if (*ps->p != ',') {
      hcq_expr_release(acc);
      return parse_fail(ps, "expected ',' or ')' in min/max");
    }
    ps->p++;
    hcq_expr_t *next = parse_expr(ps);
    if (!next) {
      hcq_expr_release(acc);
      return NULL;
    }
    uint32_t tall = too_tall(acc, next);
    if (tall) {
      hcq_expr_release(acc);
      hcq_expr_release(next);
      return chain_fail(ps, (size_t)args + 1, tall, next_arg, "min/max arguments");
    }
    acc = combine(ps, is_min ? HCQ_EXPR_MIN : HCQ_EXPR_MAX, acc, next);
    if (!acc) return NULL;
    args++;
  }
  if (args < 2) {
    hcq_expr_release(acc);
    return parse_fail(ps, "min/max needs at least two arguments");
  }
  ps->p++;
  return acc;
}

/* A name at ps->p (a letter or '_'): min or max with its arguments, else one of the variables. */
static hcq_expr_t *parse_name(parser_t *ps) {
  const char *start = ps->p;
  while (isalnum((unsigned char)*ps->p) || *ps->p == '_') ps->p++;
  size_t n = (size_t)(ps->p - start);
  bool is_min = n == 3 && !strncmp(start, "min", 3), is_max = n == 3 && !strncmp(start, "max", 3);
  if (is_min || is_max) return parse_min_max(ps, is_min);
  for (size_t i = 0; i < ps->nvars; i++) {
    const char *name = hcq_var_name(ps->vars[i]);
    if (name && strlen(name) == n && !strncmp(name, start, n)) return hcq_expr_retain(ps->vars[i]);
  }
  if (!ps->err)
    ps->err =
        hcq_status_make(HCQ_NOT_FOUND, "expression \"%s\": unknown variable \"%.*s\" at column %d",
                        ps->text, (int)(n > 64 ? 64 : n), start, (int)(start - ps->text) + 1);
  return NULL;
}

static hcq_expr_t *parse_primary(parser_t *ps) {
  skip_ws(ps);
  if (isdigit((unsigned char)*ps->p)) return parse_number(ps);
  if (isalpha((unsigned char)*ps->p) || *ps->p == '_') return parse_name(ps);
  if (*ps->p == '(') {
    ps->p++;
    hcq_expr_t *e = parse_expr(ps);
    if (!e) return NULL;
    skip_ws(ps);
    if (*ps->p != ')') {
      hcq_expr_release(e);
      return parse_fail(ps, "expected ')'");
    }
    ps->p++;
    return e;
  }
  return parse_fail(ps, "expected a number, variable or '('");
}

static hcq_expr_t *parse_unary(parser_t *ps) {
  skip_ws(ps);
  if (*ps->p == '-') {
    ps->p++;
    if (++ps->depth > PARSE_MAX_DEPTH) return parse_fail(ps, "expression nested too deeply");
    hcq_expr_t *a = parse_unary(ps);
    ps->depth--;
    if (!a) return NULL;
    hcq_expr_t *r = hcq_expr_neg(a);
    hcq_expr_release(a);
    return r ? r : oom_fail(ps);
  }
  return parse_primary(ps);
}

static hcq_expr_t *parse_term(parser_t *ps) {
  hcq_expr_t *acc = parse_unary(ps);
  size_t terms = 1;
  while (acc) {
    skip_ws(ps);
    hcq_expr_op_t op;
    if (*ps->p == '*') {
      op = HCQ_EXPR_MUL;
      ps->p++;
    } else if (ps->p[0] == '/' && ps->p[1] == '/') {
      op = HCQ_EXPR_FLOORDIV;
      ps->p += 2;
    } else if (*ps->p == '/') {
      hcq_expr_release(acc);
      return parse_fail(ps, "'/' is not an operator (use '//' for floor division)");
    } else if (*ps->p == '%') {
      op = HCQ_EXPR_MOD;
      ps->p++;
    } else {
      break;
    }
    hcq_expr_t *rhs = parse_unary(ps);
    if (!rhs) {
      hcq_expr_release(acc);
      return NULL;
    }
    terms++;
    uint32_t tall = too_tall(acc, rhs);
    if (tall) {
      hcq_expr_release(acc);
      hcq_expr_release(rhs);
      return chain_fail(ps, terms, tall, next_factor, "factors");
    }
    acc = combine(ps, op, acc, rhs);
  }
  return acc;
}

static hcq_expr_t *parse_expr(parser_t *ps) {
  if (++ps->depth > PARSE_MAX_DEPTH) return parse_fail(ps, "expression nested too deeply");
  hcq_expr_t *acc = parse_term(ps);
  size_t terms = 1;
  while (acc) {
    skip_ws(ps);
    hcq_expr_op_t op;
    if (*ps->p == '+')
      op = HCQ_EXPR_ADD;
    else if (*ps->p == '-')
      op = HCQ_EXPR_SUB;
    else
      break;
    ps->p++;
    hcq_expr_t *rhs = parse_term(ps);
    if (!rhs) {
      hcq_expr_release(acc);
      acc = NULL;
      break;
    }
    terms++;
    uint32_t tall = too_tall(acc, rhs);
    if (tall) {
      hcq_expr_release(acc);
      hcq_expr_release(rhs);
      acc = chain_fail(ps, terms, tall, next_term, "terms");
      break;
    }
    acc = combine(ps, op, acc, rhs);
  }
  ps->depth--;
  return acc;
}

hcq_status_t hcq_expr_parse(const char *text, const hcq_expr_t *const *vars, size_t nvars,
                            hcq_expr_t **out_expr) {
  if (!out_expr) return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_expr_parse: out_expr is NULL");
  *out_expr = NULL;
  if (!text) return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_expr_parse: text is NULL");
  if (nvars && !vars)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_expr_parse: %zu variables but vars is NULL",
                           nvars);
  parser_t ps = {text, text, vars, nvars, 0, NULL};
  hcq_expr_t *e = parse_expr(&ps);
  if (e) {
    skip_ws(&ps);
    if (*ps.p) {
      hcq_expr_release(e);
      e = parse_fail(&ps, "unexpected text after the expression");
    }
  }
  if (!e)
    return ps.err ? ps.err : hcq_status_make(HCQ_INTERNAL, "expression \"%s\": parse failed", text);
  *out_expr = e;
  return NULL;
}
