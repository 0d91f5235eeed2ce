"""10_llm, dense LLMs: where the sink sits (first token, BOS, delimiters; placement), Gu et al.'s sink rate read from
the first key (first_key_rates), the survey across models with its claims and controls (llm_survey, survey_chain,
xiao_position), and its plots (placement_plots). The "What we saw" paragraphs are written in the notebook's cells."""
