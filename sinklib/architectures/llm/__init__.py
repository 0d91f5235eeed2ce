"""10_llm, dense LLMs: where the sink sits (first token, BOS, delimiters; placement), the survey across models
(llm_survey) and its plots."""
