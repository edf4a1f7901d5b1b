# The MQTT plain profile for the host build: mcpb_mqtt (the profile, core/src/mcpb_mqtt.c),
# mcpb_mqtt_posix (the host's MQTT 3.1.1 client and the --mqtt loop), their cmocka tests, and
# mcpb_mqtt_host_hook(), which the top-level CMakeLists.txt calls to give pump1-host --mqtt.
# Works included from the top-level CMakeLists.txt (after mcpb_core exists) and on its own.

set(MCPB_MQTT_DIR ${CMAKE_CURRENT_LIST_DIR})
set(MCPB_MQTT_FLAGS -Wall -Wextra -Werror -pedantic)

add_library(mcpb_mqtt STATIC ${MCPB_MQTT_DIR}/core/src/mcpb_mqtt.c)
target_include_directories(mcpb_mqtt PUBLIC ${MCPB_MQTT_DIR}/include)
if(TARGET mcpb_core)
    target_link_libraries(mcpb_mqtt PUBLIC mcpb_core)
else()
    # On its own: the core sources the profile uses (register frame, too-large answer, back-off).
    target_sources(mcpb_mqtt PRIVATE
        ${MCPB_MQTT_DIR}/core/src/messages.c
        ${MCPB_MQTT_DIR}/core/src/json_scan.c
        ${MCPB_MQTT_DIR}/core/src/backoff.c
        ${MCPB_MQTT_DIR}/core/src/log_text.c)
endif()

add_library(mcpb_mqtt_posix STATIC ${MCPB_MQTT_DIR}/ports/posix/mqtt_posix.c)
target_include_directories(mcpb_mqtt_posix PUBLIC ${MCPB_MQTT_DIR}/ports/posix)
target_link_libraries(mcpb_mqtt_posix PUBLIC mcpb_mqtt)

# The top-level build turns the sanitizers on for everything (MCPB_SANITIZE); on its own the
# MQTT targets turn them on themselves, so that the tests always run under ASan and UBSan.
if(NOT DEFINED MCPB_SANITIZE)
    set(MCPB_MQTT_SANITIZE -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -g)
endif()

foreach(target mcpb_mqtt mcpb_mqtt_posix)
    set_target_properties(${target} PROPERTIES C_STANDARD 99 C_STANDARD_REQUIRED ON C_EXTENSIONS OFF)
    target_compile_options(${target} PRIVATE ${MCPB_MQTT_FLAGS} ${MCPB_MQTT_SANITIZE})
endforeach()

# pump1-host --mqtt host:port --slot S: links the client, adds host/host_mqtt.c (host_mqtt_run) and
# tells the program it is there (pump1_host.c includes host_mqtt.h under MCPB_HOST_MQTT).
function(mcpb_mqtt_host_hook target)
    target_sources(${target} PRIVATE ${MCPB_MQTT_DIR}/host/host_mqtt.c)
    target_link_libraries(${target} PRIVATE mcpb_mqtt_posix)
    target_compile_definitions(${target} PRIVATE MCPB_WITH_MQTT=1 MCPB_HOST_MQTT=1)
endfunction()

# The tests come with MCPB_TESTS (on when libmcpb-idf is the top-level project).
if(DEFINED MCPB_TESTS AND NOT MCPB_TESTS)
    return()
endif()
find_path(MCPB_CMOCKA_INCLUDE cmocka.h)
find_library(MCPB_CMOCKA_LIBRARY cmocka)
if(MCPB_CMOCKA_INCLUDE AND MCPB_CMOCKA_LIBRARY)
    enable_testing()
    foreach(name test_mqtt_profile test_mqtt_packet)
        add_executable(${name} ${MCPB_MQTT_DIR}/tests/unit/${name}.c)
        target_include_directories(${name} PRIVATE ${MCPB_CMOCKA_INCLUDE})
        set_target_properties(${name} PROPERTIES C_STANDARD 99 C_STANDARD_REQUIRED ON C_EXTENSIONS OFF)
        target_compile_options(${name} PRIVATE ${MCPB_MQTT_FLAGS} ${MCPB_MQTT_SANITIZE})
        target_link_options(${name} PRIVATE ${MCPB_MQTT_SANITIZE})
        target_link_libraries(${name} PRIVATE mcpb_mqtt_posix ${MCPB_CMOCKA_LIBRARY})
        add_test(NAME mqtt_${name} COMMAND ${name})
        set_tests_properties(mqtt_${name} PROPERTIES TIMEOUT 60)
    endforeach()
else()
    message(FATAL_ERROR "cmocka not found (Debian: libcmocka-dev; scripts/bootstrap test installs it): the MQTT unit tests cannot be built")
endif()
