"""Stage 9, the jobs a user asks for: check, inspect, report, smoke and db validate, over the stages below."""
