// src/cli/commands.hpp: one function per subcommand (each in <name>_command.cpp).
#pragma once

#include "cli/args.hpp"

namespace rotary::cli {

// Each returns the process exit code; errors are thrown (main prints them and exits 2).
int run_presets(Args& args);
int run_freqs(Args& args);
int run_explain(Args& args);
int run_table(Args& args);
int run_apply(Args& args);
int run_verify_golden(Args& args);
int run_check(Args& args);
int run_bench(Args& args);
int run_report(Args& args);
int run_diagnose(Args& args);
int run_convert_weights(Args& args);
int run_attention(Args& args);
int run_export(Args& args);
int run_diverge(Args& args);

extern const char* const kPresetsHelp;
extern const char* const kFreqsHelp;
extern const char* const kExplainHelp;
extern const char* const kTableHelp;
extern const char* const kApplyHelp;
extern const char* const kVerifyGoldenHelp;
extern const char* const kCheckHelp;
extern const char* const kBenchHelp;
extern const char* const kReportHelp;
extern const char* const kDiagnoseHelp;
extern const char* const kConvertWeightsHelp;
extern const char* const kAttentionHelp;
extern const char* const kExportHelp;
extern const char* const kDivergeHelp;

}  // namespace rotary::cli
