# Node layouts for the multi-rank tests: one machine acts as several nodes
# (mpi_tests/harness/vnode.sh sets VMMIPC_NODE_ID per rank from
# VMMIPC_TEST_LAYOUT, a node index per rank). Every multi-rank suite runs on
# these as well as on its equal layouts (DESIGN.md section 8): uneven nodes
# {2,1}, {1,2} and {3,1}, one rank per node {1,1,1}, and round robin over two
# nodes (ranks 0,2,4 | 1,3, as `mpirun --map-by node` places them). The
# entries carry the ctest label "layouts" (the GPU script runs them with -L).
set(VMMIPC_TEST_LAYOUTS 0,0,1 0,1,1 0,0,0,1 0,1,2 0,1,0,1,0)
set(VMMIPC_TEST_VNODE ${PROJECT_SOURCE_DIR}/mpi_tests/harness/vnode.sh)
# The CPU a multi-rank entry declares (ctest PROCESSORS) on the stand-in,
# whatever its rank count: its ranks mostly wait (poll, and sched_yield
# under Open MPI's --oversubscribe). Measured on 2 cores, the layout entries
# one at a time kept 0.8 of a core busy; with two at a time (ctest -j2) the
# whole suite took 240 s instead of 451 s, with the same results. MPICH's
# waiting ranks spin instead: CI's MPICH stage runs one entry at a time. On
# GPUs an entry still declares a processor per rank.
function(vmmipc_test_processors out np)
  if(VMMIPC_TEST_DRIVER STREQUAL "standin")
    set(${out} 1 PARENT_SCOPE)
  else()
    set(${out} ${np} PARENT_SCOPE)
  endif()
endfunction()

# The name of a layout in test names: contiguous nodes by their sizes
# (0,0,1 -> layout_2_1), round robin over k nodes as rr<k> (0,1,0,1,0 ->
# layout_rr2), anything else by its indices (layout_at_0_2_1). *np gets the
# rank count.
function(vmmipc_layout_name layout out np)
  string(REPLACE "," ";" idx "${layout}")
  list(LENGTH idx n)
  set(sizes "")
  set(contiguous TRUE)
  set(prev -1)
  set(count 0)
  set(robin TRUE)
  set(nodes 0)
  foreach(i ${idx})
    if(NOT i MATCHES "^[0-9]+$")
      message(FATAL_ERROR "node layout '${layout}': '${i}' is not a node index")
    endif()
    if(i GREATER_EQUAL nodes)
      math(EXPR nodes "${i} + 1")
    endif()
  endforeach()
  set(r 0)
  foreach(i ${idx})
    math(EXPR want "${r} % ${nodes}")
    if(NOT i EQUAL want)
      set(robin FALSE)
    endif()
    math(EXPR next "${prev} + 1")
    if(i EQUAL prev)
      math(EXPR count "${count} + 1")
    elseif(i EQUAL next)
      if(count)
        list(APPEND sizes ${count})
      endif()
      set(count 1)
      set(prev ${i})
    else()
      set(contiguous FALSE)
    endif()
    math(EXPR r "${r} + 1")
  endforeach()
  list(APPEND sizes ${count})
  if(contiguous)
    string(REPLACE ";" "_" name "${sizes}")
  elseif(robin)
    set(name "rr${nodes}")
  else()
    string(REPLACE ";" "_" name "at_${idx}")
  endif()
  set(${out} "layout_${name}" PARENT_SCOPE)
  set(${np} ${n} PARENT_SCOPE)
endfunction()

# vmmipc_layout_tests(NAME COMMAND cmd... [LAYOUTS l...] [ENV K=V...]
#                     [TIMEOUT s] [SUFFIX .name] [SKIP_RETURN_CODE c])
# adds "NAME.np<N>.layout_<name>SUFFIX" for each layout (default: all of
# VMMIPC_TEST_LAYOUTS): cmd under the launcher with N ranks, each on its
# virtual node.
function(vmmipc_layout_tests name)
  cmake_parse_arguments(L "" "TIMEOUT;SUFFIX;SKIP_RETURN_CODE" "COMMAND;LAYOUTS;ENV" ${ARGN})
  if(NOT L_LAYOUTS)
    set(L_LAYOUTS ${VMMIPC_TEST_LAYOUTS})
  endif()
  if(NOT L_TIMEOUT)
    set(L_TIMEOUT 180)
  endif()
  foreach(layout ${L_LAYOUTS})
    vmmipc_layout_name(${layout} lname np)
    set(t ${name}.np${np}.${lname}${L_SUFFIX})
    vmmipc_test_processors(procs ${np})
    add_test(NAME ${t}
             COMMAND ${VMMIPC_TEST_MPIEXEC} ${MPIEXEC_NUMPROC_FLAG} ${np} ${VMMIPC_MPIEXEC_ARGS}
                     ${VMMIPC_TEST_VNODE} ${L_COMMAND})
    set_tests_properties(${t} PROPERTIES TIMEOUT ${L_TIMEOUT} PROCESSORS ${procs} LABELS layouts
                         ENVIRONMENT "${L_ENV};VMMIPC_TEST_LAYOUT=${layout}")
    if(L_SKIP_RETURN_CODE)
      set_tests_properties(${t} PROPERTIES SKIP_RETURN_CODE ${L_SKIP_RETURN_CODE})
    endif()
  endforeach()
endfunction()
