// The syntax tree of a parsed Jinja template: expressions and statements, each
// with the template line it came from (for error messages). Built by the parser
// (jinja_parser.cpp), walked by the interpreter (jinja_interpreter.cpp).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "chat/jinja_value.h"

namespace fafo::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    Literal,  // value
    Name,     // name
    List,     // operands: the items
    Tuple,    // operands: the items
    Dict,     // operands: key, value, key, value, ...
    Attr,     // operands[0].name
    Item,     // operands[0][operands[1]]
    Slice,    // operands[0][operands[1]:operands[2]:operands[3]] (null bounds are absent)
    Call,     // operands[0](operands[1..], keywords)
    Filter,   // operands[0] | name(operands[1..], keywords)
    Test,     // operands[0] is [not] name(operands[1..], keywords)
    Not,      // not operands[0]
    Negate,   // -operands[0]
    Plus,     // +operands[0]
    And,      // operands[0] and operands[1]
    Or,       // operands[0] or operands[1]
    Binary,   // operands[0] name operands[1]: + - * / // % ** ~
    Compare,  // operands[0] ops[0] operands[1] ops[1] operands[2] ...: == != < > <= >= in, "not in"
    Cond,     // operands[1] if operands[0] else operands[2] (null: undefined)
  };
  Kind kind = Kind::Literal;
  int line = 0;
  Value value;
  std::string name;
  std::vector<ExprPtr> operands;
  std::vector<std::pair<std::string, ExprPtr>> keywords;
  std::vector<std::string> ops;
  bool negated = false;  // Test: `is not`
};

// Where a `set` or `for` stores values: one name, several names (a, b = ...), or a
// namespace attribute (ns.count = ...).
struct AssignTarget {
  std::vector<std::string> names;
  std::string attribute;  // non-empty: names[0].attribute
  bool unpack = false;    // a tuple of names
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  enum class Kind {
    Text,         // text
    Output,       // {{ expr }}
    If,           // conditions[i] -> bodies[i]; else_body
    For,          // for target in expr [if condition]: body; else_body when nothing was visited
    Set,          // set target = expr
    SetBlock,     // set target [| filter expr]: body ... endset
    Macro,        // macro name(params = defaults): body
    FilterBlock,  // filter expr: body ... endfilter (expr filters the Name "\x01body")
    With,         // with targets = values: body ... endwith
    Break,
    Continue,
    Block,        // body in the current scope (Hugging Face's {% generation %})
  };
  Kind kind = Kind::Text;
  int line = 0;
  std::string text;  // Text: the literal text; Macro: the macro's name
  ExprPtr expr;
  ExprPtr condition;
  AssignTarget target;
  std::vector<ExprPtr> conditions;
  std::vector<Body> bodies;
  Body body;
  Body else_body;
  std::vector<std::string> params;  // Macro parameters; With: the names
  std::vector<ExprPtr> defaults;    // Macro: default per parameter (null: none); With: the values
};

// The name a filter block's filter chain applies to (not a valid identifier, so no
// template can shadow it).
inline constexpr const char* kFilterBlockBody = "\x01body";

// A parsed template.
struct Template {
  Body body;
};

}  // namespace fafo::jinja
