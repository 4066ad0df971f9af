"""The calculator: an MCP tool server that verifiers runs as `python -m` this module."""

from __future__ import annotations

import ast
import operator

import verifiers.v1 as vf

_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
              ast.Div: operator.truediv, ast.USub: operator.neg}
MAX_EXPRESSION_CHARS = 200  # the model writes the expression: bounded, and no powers


def evaluate(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](evaluate(node.left), evaluate(node.right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](evaluate(node.operand))
    raise ValueError("only numbers and + - * / are allowed")


class Calculator(vf.Toolset[vf.SharedToolsetConfig]):
    TOOL_PREFIX = "calc"

    @vf.tool
    def calculate(self, expression: str) -> str:
        """Evaluate an arithmetic expression such as '17 * 23'."""
        try:
            if len(expression) > MAX_EXPRESSION_CHARS:
                raise ValueError(f"longer than {MAX_EXPRESSION_CHARS} characters")
            value = evaluate(ast.parse(expression, mode="eval").body)
        except (SyntaxError, ValueError, ZeroDivisionError, OverflowError) as error:
            return f"error: {error}"
        return str(int(value)) if float(value).is_integer() else str(value)


if __name__ == "__main__":
    Calculator.run()
