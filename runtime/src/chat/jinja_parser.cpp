#include "chat/jinja_parser.h"

#include <algorithm>
#include <initializer_list>

#include "chat/jinja_builtins.h"

namespace fafo::jinja {

namespace {

using Kind = ChatTemplateError::Kind;
using TT = Token::Type;

// Statements Jinja2 has that this interpreter does not implement.
constexpr std::string_view kUnsupportedStatements[] = {
    "include", "import", "from", "extends", "block", "call", "raw", "do", "autoescape", "trans", "pluralize",
};
// Closing keywords, an error wherever nothing is open to close.
constexpr std::string_view kClosingKeywords[] = {
    "elif",   "else",    "endif",   "endfor",      "endset",        "endmacro", "endfilter", "endwith",
    "endraw", "endcall", "endblock", "endautoescape", "endgeneration", "endtrans",
};

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  Body parse_all() { return parse_body({}, nullptr, "", 0); }

 private:
  // ---- token helpers ----
  const Token& peek(size_t k = 0) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  const Token& next() {
    const Token& t = t_[i_];
    if (i_ + 1 < t_.size()) ++i_;
    return t;
  }
  bool at_op(std::string_view op, size_t k = 0) const { return peek(k).type == TT::Operator && peek(k).text == op; }
  bool at_name(std::string_view name, size_t k = 0) const { return peek(k).type == TT::Name && peek(k).text == name; }

  static std::string describe(const Token& t) {
    switch (t.type) {
      case TT::End: return "the end of the template";
      case TT::Text: return "template text";
      case TT::VarEnd: return "'}}'";
      case TT::BlockEnd: return "'%}'";
      case TT::VarBegin: return "'{{'";
      case TT::BlockBegin: return "'{%'";
      case TT::String: return "a string";
      default: return "'" + t.text + "'";
    }
  }

  [[noreturn]] void syntax_error(const std::string& message, int line) const {
    throw ChatTemplateError(Kind::Syntax, message, line);
  }
  [[noreturn]] void unsupported(const std::string& what, int line) const {
    throw ChatTemplateError(Kind::Unsupported, "unsupported construct: " + what, line);
  }

  void expect_op(std::string_view op) {
    if (!at_op(op)) syntax_error("expected '" + std::string(op) + "', got " + describe(peek()), peek().line);
    next();
  }
  void expect(TT type, const char* what) {
    if (peek().type != type) syntax_error(std::string("expected ") + what + ", got " + describe(peek()), peek().line);
    next();
  }
  void expect_block_end() { expect(TT::BlockEnd, "'%}'"); }
  std::string expect_name() {
    if (peek().type != TT::Name) syntax_error("expected a name, got " + describe(peek()), peek().line);
    return next().text;
  }

  ExprPtr make(Expr::Kind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }
  ExprPtr make(Expr::Kind kind, int line, ExprPtr a, ExprPtr b = nullptr) {
    ExprPtr e = make(kind, line);
    e->operands.push_back(std::move(a));
    if (b) e->operands.push_back(std::move(b));
    return e;
  }

  // Guards the recursive descent against stack exhaustion on absurd nesting.
  struct DepthGuard {
    explicit DepthGuard(Parser& p) : parser(p) {
      if (++parser.depth_ > 200) throw ChatTemplateError(Kind::Limit, "expressions or blocks nest too deeply", parser.peek().line);
    }
    ~DepthGuard() { --parser.depth_; }
    Parser& parser;
  };

  // ---- statements ----

  // Parses until a block tag whose keyword is one of `ends` (consumed, with its
  // '{%'; the caller parses the rest of that tag) or the end of the tokens.
  Body parse_body(std::initializer_list<std::string_view> ends, std::string* found, const char* opener, int open_line) {
    DepthGuard guard(*this);
    Body body;
    for (;;) {
      const Token& t = peek();
      if (t.type == TT::End) {
        if (ends.size() == 0) return body;
        syntax_error(std::string("'{% ") + opener + " %}' is never closed (expected '{% " + std::string(*(ends.end() - 1)) +
                         " %}' before the end of the template)",
                     open_line);
      }
      if (t.type == TT::Text) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::Text;
        s->line = t.line;
        s->text = next().text;
        body.push_back(std::move(s));
      } else if (t.type == TT::VarBegin) {
        next();
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::Output;
        s->line = t.line;
        s->expr = parse_tuple(true);
        expect(TT::VarEnd, "'}}'");
        body.push_back(std::move(s));
      } else if (t.type == TT::BlockBegin) {
        const Token& keyword = peek(1);
        if (keyword.type != TT::Name) syntax_error("expected a statement name after '{%', got " + describe(keyword), keyword.line);
        if (std::find(ends.begin(), ends.end(), keyword.text) != ends.end()) {
          next();
          *found = next().text;
          return body;
        }
        next();
        body.push_back(parse_statement());
      } else {
        syntax_error("unexpected " + describe(t), t.line);
      }
    }
  }

  StmtPtr parse_statement() {
    const Token kw = next();
    const std::string& k = kw.text;
    auto s = std::make_unique<Stmt>();
    s->line = kw.line;
    if (k == "if") return parse_if(std::move(s));
    if (k == "for") return parse_for(std::move(s));
    if (k == "set") return parse_set(std::move(s));
    if (k == "macro") return parse_macro(std::move(s));
    if (k == "filter") return parse_filter_block(std::move(s));
    if (k == "with") return parse_with(std::move(s));
    if (k == "generation") {
      s->kind = Stmt::Kind::Block;
      expect_block_end();
      std::string found;
      s->body = parse_body({"endgeneration"}, &found, "generation", kw.line);
      expect_block_end();
      return s;
    }
    if (k == "break" || k == "continue") {
      if (loop_depth_ == 0) syntax_error("'" + k + "' outside of a for loop", kw.line);
      s->kind = k == "break" ? Stmt::Kind::Break : Stmt::Kind::Continue;
      expect_block_end();
      return s;
    }
    if (std::find(std::begin(kUnsupportedStatements), std::end(kUnsupportedStatements), k) != std::end(kUnsupportedStatements))
      unsupported("'{% " + k + " %}' statements", kw.line);
    if (std::find(std::begin(kClosingKeywords), std::end(kClosingKeywords), k) != std::end(kClosingKeywords))
      syntax_error("unexpected '{% " + k + " %}' (nothing open to close or continue)", kw.line);
    syntax_error("unknown statement '{% " + k + " %}'", kw.line);
  }

  StmtPtr parse_if(StmtPtr s) {
    s->kind = Stmt::Kind::If;
    const int open_line = s->line;
    s->conditions.push_back(parse_tuple(false));
    expect_block_end();
    for (;;) {
      std::string found;
      s->bodies.push_back(parse_body({"elif", "else", "endif"}, &found, "if", open_line));
      if (found == "elif") {
        s->conditions.push_back(parse_tuple(false));
        expect_block_end();
        continue;
      }
      expect_block_end();
      if (found == "else") {
        s->else_body = parse_body({"endif"}, &found, "if", open_line);
        expect_block_end();
      }
      return s;
    }
  }

  StmtPtr parse_for(StmtPtr s) {
    s->kind = Stmt::Kind::For;
    s->target = parse_assign_target(false);
    if (!at_name("in")) syntax_error("expected 'in' in the for loop, got " + describe(peek()), peek().line);
    next();
    s->expr = parse_tuple(false);
    if (at_name("if")) {
      next();
      s->condition = parse_expression(true);
    }
    if (at_name("recursive")) unsupported("recursive for loops", peek().line);
    expect_block_end();
    ++loop_depth_;
    std::string found;
    s->body = parse_body({"else", "endfor"}, &found, "for", s->line);
    --loop_depth_;
    expect_block_end();
    if (found == "else") {
      s->else_body = parse_body({"endfor"}, &found, "for", s->line);
      expect_block_end();
    }
    return s;
  }

  StmtPtr parse_set(StmtPtr s) {
    s->target = parse_assign_target(true);
    if (at_op("=")) {
      next();
      s->kind = Stmt::Kind::Set;
      s->expr = parse_tuple(true);
      expect_block_end();
      return s;
    }
    s->kind = Stmt::Kind::SetBlock;
    if (s->target.unpack) syntax_error("a block set assigns to one name", s->line);
    if (at_op("|")) {
      next();
      s->expr = parse_filter(name_expr(kFilterBlockBody, s->line));
      s->expr = parse_filter_expr(std::move(s->expr));
    }
    expect_block_end();
    std::string found;
    s->body = parse_body({"endset"}, &found, "set", s->line);
    expect_block_end();
    return s;
  }

  StmtPtr parse_macro(StmtPtr s) {
    s->kind = Stmt::Kind::Macro;
    s->text = expect_name();
    expect_op("(");
    while (!at_op(")")) {
      s->params.push_back(expect_name());
      if (at_op("=")) {
        next();
        s->defaults.push_back(parse_expression(true));
      } else {
        s->defaults.push_back(nullptr);
      }
      if (!at_op(")")) expect_op(",");
    }
    next();
    expect_block_end();
    const int saved_loop_depth = loop_depth_;
    loop_depth_ = 0;
    std::string found;
    s->body = parse_body({"endmacro"}, &found, "macro", s->line);
    loop_depth_ = saved_loop_depth;
    if (peek().type == TT::Name) next();  // {% endmacro name %}
    expect_block_end();
    return s;
  }

  StmtPtr parse_filter_block(StmtPtr s) {
    s->kind = Stmt::Kind::FilterBlock;
    s->expr = parse_filter_expr(parse_filter(name_expr(kFilterBlockBody, s->line)));
    expect_block_end();
    std::string found;
    s->body = parse_body({"endfilter"}, &found, "filter", s->line);
    expect_block_end();
    return s;
  }

  StmtPtr parse_with(StmtPtr s) {
    s->kind = Stmt::Kind::With;
    while (peek().type != TT::BlockEnd) {
      if (!s->params.empty()) expect_op(",");
      s->params.push_back(expect_name());
      expect_op("=");
      s->defaults.push_back(parse_expression(true));
    }
    expect_block_end();
    std::string found;
    s->body = parse_body({"endwith"}, &found, "with", s->line);
    expect_block_end();
    return s;
  }

  AssignTarget parse_assign_target(bool allow_attribute) {
    AssignTarget target;
    const bool parenthesized = at_op("(");
    if (parenthesized) next();
    target.names.push_back(expect_name());
    if (allow_attribute && !parenthesized && at_op(".")) {
      next();
      target.attribute = expect_name();
      return target;
    }
    while (at_op(",")) {
      next();
      if (parenthesized && at_op(")")) break;
      target.names.push_back(expect_name());
      target.unpack = true;
    }
    if (parenthesized) {
      expect_op(")");
      target.unpack = true;
    }
    return target;
  }

  // ---- expressions, lowest precedence first (as Jinja2's parser) ----

  ExprPtr name_expr(const std::string& name, int line) {
    ExprPtr e = make(Expr::Kind::Name, line);
    e->name = name;
    return e;
  }

  bool at_tuple_end() const {
    const TT t = peek().type;
    return t == TT::VarEnd || t == TT::BlockEnd || t == TT::End || at_op(")") || at_op("=");
  }

  // a, b, c (an implicit tuple) or a single expression.
  ExprPtr parse_tuple(bool with_condexpr) {
    const int line = peek().line;
    ExprPtr first = parse_expression(with_condexpr);
    if (!at_op(",")) return first;
    ExprPtr tuple = make(Expr::Kind::Tuple, line);
    tuple->operands.push_back(std::move(first));
    while (at_op(",")) {
      next();
      if (at_tuple_end()) break;
      tuple->operands.push_back(parse_expression(with_condexpr));
    }
    return tuple;
  }

  ExprPtr parse_expression(bool with_condexpr) { return with_condexpr ? parse_condexpr() : parse_or(); }

  ExprPtr parse_condexpr() {
    ExprPtr e = parse_or();
    while (at_name("if")) {
      const int line = next().line;
      ExprPtr cond = parse_or();
      ExprPtr otherwise;
      if (at_name("else")) {
        next();
        otherwise = parse_condexpr();
      }
      ExprPtr c = make(Expr::Kind::Cond, line, std::move(cond), std::move(e));
      c->operands.push_back(std::move(otherwise));
      e = std::move(c);
    }
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (at_name("or")) {
      const int line = next().line;
      e = make(Expr::Kind::Or, line, std::move(e), parse_and());
    }
    return e;
  }

  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (at_name("and")) {
      const int line = next().line;
      e = make(Expr::Kind::And, line, std::move(e), parse_not());
    }
    return e;
  }

  ExprPtr parse_not() {
    DepthGuard guard(*this);
    if (at_name("not")) {
      const int line = next().line;
      return make(Expr::Kind::Not, line, parse_not());
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const int line = peek().line;
    ExprPtr first = parse_math1();
    ExprPtr cmp;
    for (;;) {
      std::string op;
      if (peek().type == TT::Operator &&
          (at_op("==") || at_op("!=") || at_op("<") || at_op(">") || at_op("<=") || at_op(">="))) {
        op = next().text;
      } else if (at_name("in")) {
        next();
        op = "in";
      } else if (at_name("not") && at_name("in", 1)) {
        next();
        next();
        op = "not in";
      } else {
        break;
      }
      if (!cmp) {
        cmp = make(Expr::Kind::Compare, line);
        cmp->operands.push_back(std::move(first));
      }
      cmp->ops.push_back(op);
      cmp->operands.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(first);
  }

  ExprPtr binary(std::string op, int line, ExprPtr a, ExprPtr b) {
    ExprPtr e = make(Expr::Kind::Binary, line, std::move(a), std::move(b));
    e->name = std::move(op);
    return e;
  }

  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    while (at_op("+") || at_op("-")) {
      const Token& op = next();
      e = binary(op.text, op.line, std::move(e), parse_concat());
    }
    return e;
  }

  ExprPtr parse_concat() {
    ExprPtr e = parse_math2();
    while (at_op("~")) {
      const Token& op = next();
      e = binary(op.text, op.line, std::move(e), parse_math2());
    }
    return e;
  }

  ExprPtr parse_math2() {
    ExprPtr e = parse_pow();
    while (at_op("*") || at_op("/") || at_op("//") || at_op("%")) {
      const Token& op = next();
      e = binary(op.text, op.line, std::move(e), parse_pow());
    }
    return e;
  }

  ExprPtr parse_pow() {
    ExprPtr e = parse_unary(true);
    while (at_op("**")) {
      const Token& op = next();
      e = binary(op.text, op.line, std::move(e), parse_unary(true));
    }
    return e;
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(*this);
    ExprPtr e;
    if (at_op("-") || at_op("+")) {
      const Token& op = next();
      e = make(op.text == "-" ? Expr::Kind::Negate : Expr::Kind::Plus, op.line, parse_unary(false));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr literal(Value v, int line) {
    ExprPtr e = make(Expr::Kind::Literal, line);
    e->value = std::move(v);
    return e;
  }

  ExprPtr parse_primary() {
    DepthGuard guard(*this);
    const Token& t = peek();
    const int line = t.line;
    switch (t.type) {
      case TT::Name: {
        const std::string name = next().text;
        if (name == "true" || name == "True") return literal(Value::boolean(true), line);
        if (name == "false" || name == "False") return literal(Value::boolean(false), line);
        if (name == "none" || name == "None") return literal(Value::none(), line);
        return name_expr(name, line);
      }
      case TT::String: {
        std::string s = next().text;
        while (peek().type == TT::String) s += next().text;  // "a" "b" is "ab", as in Python
        return literal(Value::string(std::move(s)), line);
      }
      case TT::Integer: return literal(Value::integer(next().int_value), line);
      case TT::Float: return literal(Value::number(next().float_value), line);
      case TT::Operator:
        if (t.text == "(") {
          next();
          if (at_op(")")) {
            next();
            return make(Expr::Kind::Tuple, line);
          }
          ExprPtr first = parse_expression(true);
          if (at_op(")")) {
            next();
            return first;
          }
          ExprPtr tuple = make(Expr::Kind::Tuple, line);
          tuple->operands.push_back(std::move(first));
          while (at_op(",")) {
            next();
            if (at_op(")")) break;
            tuple->operands.push_back(parse_expression(true));
          }
          expect_op(")");
          return tuple;
        }
        if (t.text == "[") {
          next();
          ExprPtr list = make(Expr::Kind::List, line);
          while (!at_op("]")) {
            list->operands.push_back(parse_expression(true));
            if (!at_op("]")) expect_op(",");
          }
          next();
          return list;
        }
        if (t.text == "{") {
          next();
          ExprPtr dict = make(Expr::Kind::Dict, line);
          while (!at_op("}")) {
            dict->operands.push_back(parse_expression(true));
            expect_op(":");
            dict->operands.push_back(parse_expression(true));
            if (!at_op("}")) expect_op(",");
          }
          next();
          return dict;
        }
        if (t.text == "*" || t.text == "**") unsupported("'" + t.text + "' argument unpacking", line);
        break;
      default: break;
    }
    syntax_error("unexpected " + describe(t) + " in an expression", line);
  }

  ExprPtr parse_postfix(ExprPtr e) {
    for (;;) {
      const int line = peek().line;
      if (at_op(".")) {
        next();
        if (peek().type == TT::Integer) {
          e = make(Expr::Kind::Item, line, std::move(e), literal(Value::integer(next().int_value), line));
        } else {
          ExprPtr attr = make(Expr::Kind::Attr, line, std::move(e));
          attr->name = expect_name();
          e = std::move(attr);
        }
      } else if (at_op("[")) {
        next();
        e = parse_subscript(std::move(e), line);
        expect_op("]");
      } else if (at_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr obj, int line) {
    ExprPtr start;
    if (!at_op(":")) start = parse_expression(true);
    if (!at_op(":")) {
      if (at_op(",")) unsupported("subscripts with several indexes (x[a, b])", line);
      return make(Expr::Kind::Item, line, std::move(obj), std::move(start));
    }
    next();
    ExprPtr stop, step;
    if (!at_op("]") && !at_op(":")) stop = parse_expression(true);
    if (at_op(":")) {
      next();
      if (!at_op("]")) step = parse_expression(true);
    }
    ExprPtr s = make(Expr::Kind::Slice, line);
    s->operands.push_back(std::move(obj));
    s->operands.push_back(std::move(start));
    s->operands.push_back(std::move(stop));
    s->operands.push_back(std::move(step));
    return s;
  }

  // Fills e->operands (after the subject) and e->keywords from "(a, b, key=c)".
  void parse_call_args(Expr& e) {
    expect_op("(");
    while (!at_op(")")) {
      if (at_op("*") || at_op("**")) unsupported("'" + peek().text + "' argument unpacking", peek().line);
      if (peek().type == TT::Name && at_op("=", 1)) {
        std::string key = next().text;
        next();
        e.keywords.emplace_back(std::move(key), parse_expression(true));
      } else {
        if (!e.keywords.empty()) syntax_error("a positional argument follows keyword arguments", peek().line);
        e.operands.push_back(parse_expression(true));
      }
      if (!at_op(")")) expect_op(",");
    }
    next();
  }

  ExprPtr parse_call(ExprPtr callee) {
    ExprPtr call = make(Expr::Kind::Call, peek().line, std::move(callee));
    parse_call_args(*call);
    return call;
  }

  std::string parse_dotted_name() {
    std::string name = expect_name();
    while (at_op(".") && peek(1).type == TT::Name) {
      next();
      name += "." + next().text;
    }
    return name;
  }

  // After '|': name [ (args) ].
  ExprPtr parse_filter(ExprPtr subject) {
    const int line = peek().line;
    ExprPtr f = make(Expr::Kind::Filter, line, std::move(subject));
    f->name = parse_dotted_name();
    if (!is_known_filter(f->name)) unsupported("the filter '" + f->name + "'", line);
    if (at_op("(")) parse_call_args(*f);
    return f;
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    for (;;) {
      if (at_op("|")) {
        next();
        e = parse_filter(std::move(e));
      } else if (at_name("is")) {
        e = parse_test(std::move(e));
      } else if (at_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_test(ExprPtr subject) {
    const int line = next().line;  // 'is'
    ExprPtr t = make(Expr::Kind::Test, line, std::move(subject));
    if (at_name("not")) {
      next();
      t->negated = true;
    }
    t->name = parse_dotted_name();
    if (!is_known_test(t->name)) unsupported("the test '" + t->name + "'", line);
    if (at_op("(")) {
      parse_call_args(*t);
    } else {
      const Token& a = peek();
      const bool starts_argument = a.type == TT::Name || a.type == TT::String || a.type == TT::Integer ||
                                   a.type == TT::Float || at_op("[") || at_op("{");
      if (starts_argument && !at_name("else") && !at_name("or") && !at_name("and")) {
        if (at_name("is")) syntax_error("tests cannot be chained with 'is'", a.line);
        t->operands.push_back(parse_postfix(parse_primary()));
      }
    }
    return t;
  }

  std::vector<Token> t_;
  size_t i_ = 0;
  int loop_depth_ = 0;
  int depth_ = 0;
};

}  // namespace

std::shared_ptr<const Template> parse_template(std::string_view source, const LexOptions& options) {
  auto t = std::make_shared<Template>();
  t->body = Parser(lex(source, options)).parse_all();
  return t;
}

}  // namespace fafo::jinja
