from llmgym.eval_sets import main

main()
