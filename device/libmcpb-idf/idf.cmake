# libmcpb-idf as an ESP-IDF component (the top-level CMakeLists.txt includes this under ESP_PLATFORM):
# the core, the MQTT plain profile, pump-1 and the ESP-IDF ports. Kconfig and idf_component.yml
# sit next to this file, where ESP-IDF and the component manager look for them.
set(MCPB_DIR ${CMAKE_CURRENT_LIST_DIR})
file(GLOB MCPB_CORE_SRCS ${MCPB_DIR}/core/src/*.c)
file(GLOB MCPB_PUMP1_SRCS ${MCPB_DIR}/pump1/src/*.c)
file(GLOB MCPB_ESP_SRCS ${MCPB_DIR}/ports/esp/*.c)

idf_component_register(
    SRCS ${MCPB_CORE_SRCS} ${MCPB_PUMP1_SRCS} ${MCPB_ESP_SRCS}
    INCLUDE_DIRS include pump1/include ports/esp
    PRIV_INCLUDE_DIRS core/src
    REQUIRES mqtt tcp_transport
    PRIV_REQUIRES esp_timer driver esp_hw_support log freertos mbedtls)

target_compile_options(${COMPONENT_LIB} PRIVATE -std=gnu99 -Wall -Wextra)

# The ways in built into the core (Kconfig MCPB_WITH_*, include/mcpb/features.h); PUBLIC, so that
# the application sees the same switches as the core.
foreach(way WEBSOCKET MULTIPLEX SERIAL)
    if(CONFIG_MCPB_WITH_${way})
        target_compile_definitions(${COMPONENT_LIB} PUBLIC MCPB_WITH_${way}=1)
    else()
        target_compile_definitions(${COMPONENT_LIB} PUBLIC MCPB_WITH_${way}=0)
    endif()
endforeach()
