/* placeholder */ int vmmipc_standin_placeholder(void); int vmmipc_standin_placeholder(void) { return 0; }
