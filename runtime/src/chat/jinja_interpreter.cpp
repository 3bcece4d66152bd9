#include "chat/jinja_interpreter.h"

#include <algorithm>
#include <memory>
#include <unordered_map>

#include "chat/jinja_builtins.h"

namespace fafo::jinja {

namespace {

using Kind = ChatTemplateError::Kind;

class Scope {
 public:
  explicit Scope(std::shared_ptr<Scope> parent) : parent_(std::move(parent)) {}

  const Value* find(const std::string& name) const {
    for (const Scope* s = this; s; s = s->parent_.get()) {
      const auto it = s->vars_.find(name);
      if (it != s->vars_.end()) return &it->second;
    }
    return nullptr;
  }
  void set(const std::string& name, Value v) { vars_[name] = std::move(v); }

 private:
  std::shared_ptr<Scope> parent_;
  std::unordered_map<std::string, Value> vars_;
};
using ScopePtr = std::shared_ptr<Scope>;

enum class Flow { Normal, Break, Continue };

// Jinja2's globals: range(), namespace(), dict().
Value range_function(CallArgs& a) {
  a.expect_at_most("range", 3, {});
  std::vector<int64_t> bounds;
  for (const Value& v : a.positional) {
    if (v.is_undefined()) fail_undefined(v);
    if (!v.is_int() && !v.is_bool()) fail_type("range() arguments must be integers, not " + type_name(v));
    bounds.push_back(v.as_int());
  }
  if (bounds.empty()) fail_type("range expected at least 1 argument, got 0");
  const int64_t start = bounds.size() > 1 ? bounds[0] : 0;
  const int64_t stop = bounds.size() > 1 ? bounds[1] : bounds[0];
  const int64_t step = bounds.size() > 2 ? bounds[2] : 1;
  if (step == 0) fail_type("range() arg 3 must not be zero");
  std::vector<Value> out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
    if (out.size() >= 1000000) fail(Kind::Limit, "range() is limited to 1e6 items");
    if (out.size() % 4096 == 4095) expect_work(static_cast<int64_t>(out.size()));  // before it all is made
    out.push_back(Value::integer(i));
    if (__builtin_add_overflow(i, step, &i)) break;  // past any bound
  }
  return Value::list(std::move(out));
}

// namespace(mapping?, key=value...) and dict(mapping?, key=value...).
Value mapping_function(CallArgs& a, bool as_namespace) {
  const char* name = as_namespace ? "namespace" : "dict";
  if (a.positional.size() > 1) fail_type(std::string(name) + "() takes at most one positional argument");
  Value out = as_namespace ? Value::namespace_object() : Value::dict();
  if (!a.positional.empty()) {
    const Value& init = a.positional[0];
    if (init.is_dict() && !init.is_namespace()) {
      for (const auto& [k, v] : init.as_dict().entries) out.as_dict().set(k, v);
    } else if (init.is_list()) {
      for (const Value& pair : init.as_list().items) {
        if (!pair.is_list() || pair.as_list().items.size() != 2) fail_type(std::string(name) + "() needs key/value pairs");
        out.as_dict().set(pair.as_list().items[0], pair.as_list().items[1]);
      }
    } else {
      fail_type(std::string(name) + "() cannot be built from a " + type_name(init));
    }
  }
  for (const auto& [k, v] : a.keyword) out.as_dict().set(Value::string(k), v);
  return out;
}

class Interpreter {
 public:
  explicit Interpreter(const RenderLimits& limits) : limits_(limits) {}

  std::string run(const Template& tmpl, const std::vector<std::pair<std::string, Value>>& variables) {
    auto globals = std::make_shared<Scope>(nullptr);
    globals->set("range", Value::function("range", range_function));
    globals->set("namespace", Value::function("namespace", [](CallArgs& a) { return mapping_function(a, true); }));
    globals->set("dict", Value::function("dict", [](CallArgs& a) { return mapping_function(a, false); }));
    auto root = std::make_shared<Scope>(globals);
    for (const auto& [name, value] : variables) root->set(name, value);
    std::string out;
    exec_body(tmpl.body, root, out);
    return out;
  }

 private:
  // ---- statements ----

  Flow exec_body(const Body& body, const ScopePtr& scope, std::string& out) {
    for (const StmtPtr& s : body) {
      const Flow flow = exec(*s, scope, out);
      if (flow != Flow::Normal) return flow;
    }
    return Flow::Normal;
  }

  Flow exec(const Stmt& s, const ScopePtr& scope, std::string& out) {
    try {
      return exec_statement(s, scope, out);
    } catch (const ChatTemplateError& e) {
      if (e.line() == 0) throw e.with_line(s.line);
      throw;
    }
  }

  size_t output_left(const std::string& out) const {
    return limits_.max_output_bytes - std::min(out.size(), limits_.max_output_bytes);
  }

  void append(std::string& out, const std::string& text) {
    if (text.size() > limits_.max_output_bytes - std::min(out.size(), limits_.max_output_bytes))
      fail(Kind::Limit, "the rendering passes its cap of " + std::to_string(limits_.max_output_bytes) + " bytes");
    out += text;
  }

  Flow exec_statement(const Stmt& s, const ScopePtr& scope, std::string& out) {
    switch (s.kind) {
      case Stmt::Kind::Text: append(out, s.text); return Flow::Normal;
      case Stmt::Kind::Output: append(out, to_str_within(eval(*s.expr, scope), output_left(out))); return Flow::Normal;
      case Stmt::Kind::If:
        for (size_t i = 0; i < s.conditions.size(); ++i)
          if (eval(*s.conditions[i], scope).truthy()) return exec_body(s.bodies[i], scope, out);
        return exec_body(s.else_body, scope, out);
      case Stmt::Kind::For: return exec_for(s, scope, out);
      case Stmt::Kind::Set: assign(s.target, eval(*s.expr, scope), scope); return Flow::Normal;
      case Stmt::Kind::SetBlock: {
        std::string captured;
        const Flow flow = exec_body(s.body, scope, captured);
        assign(s.target, s.expr ? filter_text(*s.expr, std::move(captured), scope) : Value::string(std::move(captured)), scope);
        return flow;
      }
      case Stmt::Kind::FilterBlock: {
        std::string captured;
        const Flow flow = exec_body(s.body, scope, captured);
        append(out, to_str(filter_text(*s.expr, std::move(captured), scope)));
        return flow;
      }
      case Stmt::Kind::Macro: define_macro(s, scope); return Flow::Normal;
      case Stmt::Kind::With: {
        auto inner = std::make_shared<Scope>(scope);
        for (size_t i = 0; i < s.params.size(); ++i) inner->set(s.params[i], eval(*s.defaults[i], scope));
        return exec_body(s.body, inner, out);
      }
      case Stmt::Kind::Break: return Flow::Break;
      case Stmt::Kind::Continue: return Flow::Continue;
      case Stmt::Kind::Block: return exec_body(s.body, scope, out);
    }
    return Flow::Normal;
  }

  // Applies a filter block's chain to the text its body rendered.
  Value filter_text(const Expr& chain, std::string text, const ScopePtr& scope) {
    auto inner = std::make_shared<Scope>(scope);
    inner->set(kFilterBlockBody, Value::string(std::move(text)));
    return eval(chain, inner);
  }

  void assign(const AssignTarget& target, Value v, const ScopePtr& scope) {
    if (!target.attribute.empty()) {
      const Value* ns = scope->find(target.names[0]);
      if (!ns || ns->is_undefined()) fail(Kind::Undefined, "'" + target.names[0] + "' is undefined");
      if (!ns->is_namespace())
        fail_type("cannot assign attribute on non-namespace object ('" + target.names[0] + "' is a " + type_name(*ns) + ")");
      ns->as_dict().set(Value::string(target.attribute), std::move(v));
      return;
    }
    if (!target.unpack) {
      scope->set(target.names[0], std::move(v));
      return;
    }
    if (v.is_undefined()) fail_undefined(v);
    const std::vector<Value> items = iterate(v);
    if (items.size() != target.names.size())
      fail_type((items.size() > target.names.size() ? "too many values to unpack (expected " : "not enough values to unpack (expected ") +
                std::to_string(target.names.size()) + ", got " + std::to_string(items.size()) + ")");
    for (size_t i = 0; i < items.size(); ++i) scope->set(target.names[i], items[i]);
  }

  // Each iteration runs in a fresh scope under the enclosing one: a `set` in the
  // body lasts until the end of that iteration (Jinja2 renders
  // {% set a = 1 %}{% for i in [1, 2] %}{% set a = a + i %}{{ a }}{% endfor %} as "23").
  Flow exec_for(const Stmt& s, const ScopePtr& scope, std::string& out) {
    const Value iterable = eval(*s.expr, scope);
    if (iterable.is_none()) fail_type("'NoneType' object is not iterable");
    const std::vector<Value> all = iterate(iterable);
    std::vector<Value> items;
    if (s.condition) {
      for (const Value& item : all) {
        auto probe = std::make_shared<Scope>(scope);
        assign(s.target, item, probe);
        if (eval(*s.condition, probe).truthy()) items.push_back(item);
      }
    } else {
      items = all;
    }
    if (items.empty()) return exec_body(s.else_body, scope, out);
    const auto n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      if (++iterations_ > limits_.max_loop_iterations)
        fail(Kind::Limit, "the template runs more than " + std::to_string(limits_.max_loop_iterations) +
                              " loop iterations (an endless or nested loop?)");
      count_work(1);
      auto iteration = std::make_shared<Scope>(scope);
      assign(s.target, items[static_cast<size_t>(i)], iteration);
      iteration->set("loop", loop_object(items, i));
      if (exec_body(s.body, iteration, out) == Flow::Break) break;
    }
    return Flow::Normal;
  }

  static Value loop_object(const std::vector<Value>& items, int64_t i) {
    const auto n = static_cast<int64_t>(items.size());
    Value loop = Value::dict();
    DictObject& d = loop.as_dict();
    auto put = [&](const char* key, Value v) { d.entries.emplace_back(Value::string(key), std::move(v)); };
    put("index", Value::integer(i + 1));
    put("index0", Value::integer(i));
    put("revindex", Value::integer(n - i));
    put("revindex0", Value::integer(n - i - 1));
    put("first", Value::boolean(i == 0));
    put("last", Value::boolean(i == n - 1));
    put("length", Value::integer(n));
    put("depth", Value::integer(1));
    put("depth0", Value::integer(0));
    if (i > 0) put("previtem", items[static_cast<size_t>(i - 1)]);
    if (i + 1 < n) put("nextitem", items[static_cast<size_t>(i + 1)]);
    put("cycle", Value::function("loop.cycle", [i](CallArgs& a) {
          if (a.positional.empty()) fail_type("loop.cycle() needs at least one argument");
          return a.positional[static_cast<size_t>(i) % a.positional.size()];
        }));
    return loop;
  }

  void define_macro(const Stmt& s, const ScopePtr& scope) {
    // The macro refers to its defining scope weakly: that scope holds the macro.
    std::weak_ptr<Scope> home = scope;
    const Stmt* def = &s;
    scope->set(s.text, Value::function(s.text, [this, def, home](CallArgs& args) { return call_macro(*def, home.lock(), args); }));
  }

  Value call_macro(const Stmt& def, const ScopePtr& home, CallArgs& args) {
    if (!home) fail_type("the macro '" + def.text + "' was called after its scope ended");
    if (depth_ >= limits_.max_call_depth)
      fail(Kind::Limit, "macro calls nest deeper than " + std::to_string(limits_.max_call_depth) + " (endless recursion?)");
    count_work(kMacroCallWork);
    ++depth_;
    struct Leave {
      int& depth;
      ~Leave() { --depth; }
    } leave{depth_};
    auto scope = std::make_shared<Scope>(home);
    for (const auto& [k, v] : args.keyword)
      if (std::find(def.params.begin(), def.params.end(), k) == def.params.end())
        fail_type("macro '" + def.text + "' takes no keyword argument '" + k + "'");
    for (size_t i = 0; i < def.params.size(); ++i) {
      const Value* given = args.get(i, def.params[i]);
      if (given) {
        scope->set(def.params[i], *given);
      } else if (def.defaults[i]) {
        scope->set(def.params[i], eval(*def.defaults[i], scope));
      } else {
        scope->set(def.params[i], Value::undefined("parameter '" + def.params[i] + "' was not provided"));
      }
    }
    std::vector<Value> extra;
    for (size_t i = def.params.size(); i < args.positional.size(); ++i) extra.push_back(args.positional[i]);
    scope->set("varargs", Value::tuple(std::move(extra)));
    std::string out;
    exec_body(def.body, scope, out);
    return Value::string(std::move(out));
  }

  // ---- expressions ----

  Value eval(const Expr& e, const ScopePtr& scope) {
    try {
      return eval_expression(e, scope);
    } catch (const ChatTemplateError& err) {
      if (err.line() == 0) throw err.with_line(e.line);
      throw;
    }
  }

  CallArgs eval_args(const Expr& e, const ScopePtr& scope) {
    CallArgs args;
    for (size_t i = 1; i < e.operands.size(); ++i) args.positional.push_back(eval(*e.operands[i], scope));
    for (const auto& [k, v] : e.keywords) args.keyword.emplace_back(k, eval(*v, scope));
    return args;
  }

  static Value optional_operand(Interpreter& self, const ExprPtr& e, const ScopePtr& scope) {
    return e ? self.eval(*e, scope) : Value();
  }

  bool compare_op(const std::string& op, const Value& a, const Value& b) {
    if (op == "==") return equals(a, b);
    if (op == "!=") return !equals(a, b);
    if (op == "in") return contains(b, a);
    if (op == "not in") return !contains(b, a);
    const int c = compare(a, b, op);
    if (op == "<") return c < 0;
    if (op == ">") return c > 0;
    if (op == "<=") return c <= 0;
    return c >= 0;
  }

  Value eval_expression(const Expr& e, const ScopePtr& scope) {
    switch (e.kind) {
      case Expr::Kind::Literal: return e.value;
      case Expr::Kind::Name: {
        const Value* v = scope->find(e.name);
        return v ? *v : Value::undefined("'" + e.name + "' is undefined");
      }
      case Expr::Kind::List:
      case Expr::Kind::Tuple: {
        std::vector<Value> items;
        for (const ExprPtr& item : e.operands) items.push_back(eval(*item, scope));
        return e.kind == Expr::Kind::List ? Value::list(std::move(items)) : Value::tuple(std::move(items));
      }
      case Expr::Kind::Dict: {
        Value d = Value::dict();
        for (size_t i = 0; i + 1 < e.operands.size(); i += 2) d.as_dict().set(eval(*e.operands[i], scope), eval(*e.operands[i + 1], scope));
        return d;
      }
      case Expr::Kind::Attr: return get_attribute(eval(*e.operands[0], scope), e.name);
      case Expr::Kind::Item: return get_item(eval(*e.operands[0], scope), eval(*e.operands[1], scope));
      case Expr::Kind::Slice:
        return slice(eval(*e.operands[0], scope), optional_operand(*this, e.operands[1], scope),
                     optional_operand(*this, e.operands[2], scope), optional_operand(*this, e.operands[3], scope));
      case Expr::Kind::Call: {
        const Value callee = eval(*e.operands[0], scope);
        if (callee.is_undefined()) fail_undefined(callee);
        if (!callee.is_function()) fail_type("'" + type_name(callee) + "' object is not callable");
        CallArgs args = eval_args(e, scope);
        return callee.as_function().body(args);
      }
      case Expr::Kind::Filter: {
        const Value subject = eval(*e.operands[0], scope);
        CallArgs args = eval_args(e, scope);
        return apply_filter(e.name, subject, args);
      }
      case Expr::Kind::Test: {
        const Value subject = eval(*e.operands[0], scope);
        CallArgs args = eval_args(e, scope);
        return Value::boolean(apply_test(e.name, subject, args) != e.negated);
      }
      case Expr::Kind::Not: return Value::boolean(!eval(*e.operands[0], scope).truthy());
      case Expr::Kind::Negate:
      case Expr::Kind::Plus: {
        const Value v = eval(*e.operands[0], scope);
        if (v.is_undefined()) fail_undefined(v);
        if (!v.is_number()) fail_type("bad operand type for unary " + std::string(e.kind == Expr::Kind::Negate ? "-" : "+") + ": '" + type_name(v) + "'");
        if (e.kind == Expr::Kind::Plus) return v.is_bool() ? Value::integer(v.as_int()) : v;
        return v.is_float() ? Value::number(-v.as_double()) : Value::integer(checked_neg(v.as_int()));
      }
      case Expr::Kind::And: {
        Value a = eval(*e.operands[0], scope);
        return a.truthy() ? eval(*e.operands[1], scope) : a;
      }
      case Expr::Kind::Or: {
        Value a = eval(*e.operands[0], scope);
        return a.truthy() ? a : eval(*e.operands[1], scope);
      }
      case Expr::Kind::Binary: return binary_op(e.name, eval(*e.operands[0], scope), eval(*e.operands[1], scope));
      case Expr::Kind::Compare: {
        Value left = eval(*e.operands[0], scope);
        for (size_t i = 0; i < e.ops.size(); ++i) {
          Value right = eval(*e.operands[i + 1], scope);
          if (!compare_op(e.ops[i], left, right)) return Value::boolean(false);
          left = std::move(right);
        }
        return Value::boolean(true);
      }
      case Expr::Kind::Cond:
        if (eval(*e.operands[0], scope).truthy()) return eval(*e.operands[1], scope);
        return e.operands[2] ? eval(*e.operands[2], scope) : Value::undefined("the inline if expression has no else branch");
    }
    return Value();
  }

  RenderLimits limits_;
  int depth_ = 0;
  int64_t iterations_ = 0;
};

}  // namespace

std::string render(const Template& tmpl, const std::vector<std::pair<std::string, Value>>& variables,
                   const RenderLimits& limits) {
  struct Budget {  // counted from here; cleared again after, so nothing carries to the next
    explicit Budget(size_t string_bytes) { start_render_budget(string_bytes); }
    ~Budget() { end_render_budget(); }
  } budget(limits.string_bytes());
  return Interpreter(limits).run(tmpl, variables);
}

}  // namespace fafo::jinja
