# One bounded fuzzing run for ctest: a fresh copy of the committed seeds, the fuzzer for
# SECONDS, then one summary line (executions per target) and, on a crash, libFuzzer's report.
# cmake -DFUZZER=EXE -DSEEDS=DIR -DWORK=DIR -DSECONDS=N -P run_fuzzer.cmake
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK}/corpus ${WORK}/tmp)
file(GLOB seeds ${SEEDS}/*)
file(COPY ${seeds} DESTINATION ${WORK}/corpus)

get_filename_component(name ${FUZZER} NAME)
set(log ${WORK}/fuzz.log)
execute_process(
  # The targets' scratch files go to WORK/tmp, so a crashed run leaves nothing elsewhere.
  COMMAND ${CMAKE_COMMAND} -E env TMPDIR=${WORK}/tmp
          ${FUZZER} -max_total_time=${SECONDS} -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
          -artifact_prefix=${WORK}/ ${WORK}/corpus
  WORKING_DIRECTORY ${WORK}
  RESULT_VARIABLE rc
  OUTPUT_FILE ${log} ERROR_FILE ${log})

file(READ ${log} text)
string(REGEX MATCH "stat::number_of_executed_units: *([0-9]+)" _ "${text}")
set(execs ${CMAKE_MATCH_1})
file(GLOB corpus ${WORK}/corpus/*)
list(LENGTH corpus corpus_size)
if(NOT rc EQUAL 0)
  message("${text}")
  file(GLOB artifacts ${WORK}/crash-* ${WORK}/leak-* ${WORK}/timeout-* ${WORK}/oom-*)
  message(FATAL_ERROR "${name} failed (exit ${rc}) after ${execs} executions; input: ${artifacts}\n"
                      "reproduce: ${FUZZER} ${artifacts}")
endif()
set(summary "${name}: ${execs} executions in ${SECONDS} s, corpus ${corpus_size} inputs")
message("${summary}")
file(WRITE ${WORK}/summary.txt "${summary}\n")
